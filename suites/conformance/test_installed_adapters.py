"""amd-quark, vLLM (CPU torch functions) and nvidia-modelopt adapters: the
known divergences (docs/numerics.md) of the installed packages are reproduced, shrunk to a block
of <= 32 elements, judged "implementation wrong" and explained by the
registry; with an empty registry the same run fails. Each test skips with the
reason when its package is missing (the conformance extra and the Makefile's
vLLM line install them)."""
import math
from fractions import Fraction

import pytest
import torch

from harness.conformance import Unavailable, run_conformance
from harness.conformance import verdict as vd


def _impl(factory):
    try:
        return factory()
    except Unavailable as e:
        pytest.skip(str(e))


def _explained(data, stage=None):
    """{entry id: blocks}; every explained finding shrunk and judged."""
    out, findings = {}, {}
    for c in data["cells"]:
        for st, s in c["stages"].items():
            if stage and st != stage:
                continue
            for k, v in s.get("explained", {}).items():
                out[k] = out.get(k, 0) + v
            for f in s.get("findings", []):
                if f.get("explained_by"):
                    assert "error" not in f, f
                    assert len(f["minimal"]) <= 32 and f["verdict"] == vd.IMPL_WRONG, f
                    findings.setdefault(f["explained_by"], (c, f))
    return out, findings


@pytest.mark.slow
def test_quark_mxfp6_loses_negative_zero_and_caps_the_exponent_at_127():
    from harness.conformance.adapters.quark import quark_mx

    impl = _impl(quark_mx)
    impl.scale_modes = ("even",)
    data = run_conformance([impl], formats=["mxfp6_e2m3"], dtypes=(torch.float32,), random_blocks=16)
    assert not data["failed"]
    seen, findings = _explained(data)
    assert seen.get("quark-mx-drops-negative-zero", 0) > 0, seen
    assert seen.get("quark-mx-even-scale-capped-at-2^127", 0) > 0, seen
    _, f = findings["quark-mx-drops-negative-zero"]
    i = next(i for i, (a, b) in enumerate(zip(f["impl"], f["reference"])) if repr(a) != repr(b))
    assert f["impl"][i] == 0 and math.copysign(1, f["impl"][i]) > 0 and math.copysign(1, f["spec"][i]) < 0
    _, f = findings["quark-mx-even-scale-capped-at-2^127"]
    assert max(abs(Fraction(v)) for v in f["minimal"]) >= Fraction(2) ** 127 * (2 - Fraction(1, 16))
    assert run_conformance([impl], formats=["mxfp6_e2m3"], dtypes=(torch.float32,), random_blocks=16,
                           registry=())["failed"]


def test_quark_log2_in_bfloat16():
    from harness.conformance.adapters.quark import quark_mx

    impl = _impl(quark_mx)
    impl.scale_modes = ("floor",)
    data = run_conformance([impl], formats=["mxfp4"], dtypes=(torch.bfloat16,), random_blocks=16)
    assert not data["failed"]
    seen, _ = _explained(data)
    assert seen.get("quark-mx-log2-in-input-dtype", 0) > 0, seen


def test_vllm_mxfp8_torch_rceil_one_byte_low():
    from harness.conformance.adapters.vllm import vllm_mxfp8_torch

    impl = _impl(vllm_mxfp8_torch)
    data = run_conformance([impl], dtypes=(torch.float32,), random_blocks=16)
    assert not data["failed"]
    seen, findings = _explained(data, "scales")
    for entry in ("vllm-mxfp8-rceil-float32-log2", "vllm-mxfp8-rceil-subnormal-quotient"):
        assert seen.get(entry, 0) > 0, (entry, seen)
        _, f = findings[entry]
        assert f["impl"][0] == f["spec"][0] - 1, f  # one byte low
    _, f = findings["vllm-mxfp8-rceil-subnormal-quotient"]
    assert 0 < max(abs(v) for v in f["minimal"]) / 448 < 2.0 ** -126
    assert run_conformance([impl], dtypes=(torch.float32,), random_blocks=16, registry=())["failed"]


def test_vllm_dequantize_to_dtype_multiplies_by_a_stored_reciprocal():
    from harness.conformance.adapters.vllm import vllm_nvfp4_dequant

    data = run_conformance([_impl(vllm_nvfp4_dequant)], random_blocks=16)
    assert not data["failed"]
    rates = {(c["dtype"], c["global_scale"]): c["stages"]["dequantize"]["match_rate"] for c in data["cells"]}
    # float32 output with gs = 3 (1/3 inexact): s * fl(1/gs) != fl(s / gs) for some scales;
    # powers of two and bfloat16 / float16 outputs match exactly.
    assert rates[("float32", 3.0)] < 1.0
    assert all(r == 1.0 for k, r in rates.items() if k != ("float32", 3.0)), rates
    seen, _ = _explained(data)
    assert set(seen) == {"vllm-dequantize-to-dtype-decode-side-global-scale"}, seen


def test_vllm_nvfp4_ref_drops_negative_zero_only():
    from harness.conformance.adapters.vllm import vllm_nvfp4_ref

    data = run_conformance([_impl(vllm_nvfp4_ref)], dtypes=(torch.float32,), random_blocks=16)
    assert not data["failed"]
    seen, _ = _explained(data)
    assert set(seen) == {"vllm-nvfp4-ref-drops-negative-zero"}, seen
    assert all(c["stages"]["scales"]["match_rate"] == 1.0 for c in data["cells"])


def test_vllm_reference_mxfp4_needs_a_source_tree(monkeypatch, tmp_path):
    from harness.conformance.adapters import vllm as va

    monkeypatch.delenv(va.SOURCE_ENV, raising=False)
    with pytest.raises(Unavailable, match=va.SOURCE_ENV):
        va.vllm_reference_mxfp4()
    monkeypatch.setenv(va.SOURCE_ENV, str(tmp_path))
    with pytest.raises(Unavailable, match="no tests/quantization/reference_mxfp4.py"):
        va.vllm_reference_mxfp4()


def test_vllm_reference_mxfp4_garbage_for_big_amax():
    """Runs where MOE_HARNESS_VLLM_SOURCE names a vLLM source tree."""
    from harness.conformance.adapters.vllm import vllm_reference_mxfp4

    data = run_conformance([_impl(vllm_reference_mxfp4)], random_blocks=16)
    assert not data["failed"]
    seen, findings = _explained(data)
    assert seen.get("vllm-reference-mxfp4-big-amax-garbage", 0) > 0, seen
    assert seen.get("vllm-reference-mxfp4-fp16-subnormal-amax", 0) > 0, seen
    _, f = findings["vllm-reference-mxfp4-big-amax-garbage"]
    i = next(i for i, (a, b) in enumerate(zip(f["impl"], f["reference"])) if repr(a) != repr(b))
    assert 0 < abs(f["impl"][i]) < 1e-30 and abs(f["minimal"][i]) > 1e38


def test_modelopt_nvfp4_divergences_explained():
    from harness.conformance.adapters.modelopt import modelopt_nvfp4

    impl = _impl(modelopt_nvfp4)
    data = run_conformance([impl], dtypes=(torch.bfloat16,), random_blocks=16)
    assert not data["failed"]
    seen, _ = _explained(data)
    for entry in ("modelopt-nvfp4-zero-block-scale-replaced", "modelopt-nvfp4-drops-negative-zero"):
        assert seen.get(entry, 0) > 0, (entry, seen)
    _, f = _explained(data, "scales")[1]["modelopt-nvfp4-zero-block-scale-replaced"]
    # 1.0 (E4M3 0x38) for an all-zero block, else the clamp's 2^-9 (0x01); the spec's scale is 0
    assert f["spec"][0] == 0 and f["impl"][0] in (0x38, 0x01), f
    assert run_conformance([impl], dtypes=(torch.bfloat16,), random_blocks=16, registry=())["failed"]


def test_cuda_only_adapters_skip_with_their_reason_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: suites/conformance/test_gpu_adapters.py runs them")
    data = run_conformance(["vllm-triton-nvfp4", "vllm-triton-mxfp4", "modelopt-nvfp4-fake"], formats=["nvfp4"])
    reasons = {s["name"]: s["reason"] for s in data["skipped"]}
    assert set(reasons) == {"vllm-triton-nvfp4", "vllm-triton-mxfp4", "modelopt-nvfp4-fake"}, reasons
    assert all(("CUDA" in r) or ("does not import" in r) for r in reasons.values()), reasons
    assert data["cells"] == [] and not data["failed"]
