"""vLLM's Triton kernels and ModelOpt's NVFP4 fake quantization on a CUDA
device (marked `gpu`: skipped cleanly without one). The vLLM kernels' known
bugs (an approximate float32 division, a flushed 2^-127 scale) must show up
as unexplained divergences, shrunk and judged: they are not in the registry
(kernel bugs, not conventions), so the run fails and names them. How to run
it on a CUDA machine: docs/conformance.md ("Adapters that need a CUDA
device")."""
import pytest
import torch

from harness.conformance import Unavailable, run_conformance
from harness.conformance import verdict as vd

pytestmark = [pytest.mark.gpu, pytest.mark.cuda]


def _impl(factory):
    try:
        return factory()
    except Unavailable as e:
        pytest.skip(str(e))


def _unexplained(data):
    return [(c, st, f) for c in data["cells"] for st, s in c["stages"].items()
            for f in s.get("findings", []) if not f.get("explained_by") and "error" not in f]


def test_vllm_triton_nvfp4_fp32_division_is_approximate():
    """fp32 input: `/` compiles to div.full.f32 (about 83% of values match);
    bf16 input matches exactly."""
    from harness.conformance.adapters.vllm import vllm_triton_nvfp4

    data = run_conformance([_impl(vllm_triton_nvfp4)], device="cuda", random_blocks=64)
    rates = {(c["dtype"], c["global_scale"]): c["stages"]["qdq"]["match_rate"] for c in data["cells"]}
    assert all(rates[("bfloat16", g)] == 1.0 for g in (1.0, 16.0)), rates
    assert rates[("float32", 16.0)] < 1.0, rates
    bad = _unexplained(data)
    assert bad and all(len(f["minimal"]) <= 32 and f["verdict"] == vd.IMPL_WRONG for _, _, f in bad)


def test_vllm_triton_downcast_to_mxfp_flushes_the_smallest_scale():
    """ex2.approx.ftz flushes a 2^-127 scale and zeroes the block."""
    from harness.conformance.adapters.vllm import vllm_triton_mxfp4

    data = run_conformance([_impl(vllm_triton_mxfp4)], device="cuda", dtypes=(torch.bfloat16,), random_blocks=64)
    assert data["failed"]
    bad = _unexplained(data)
    assert any(st in ("scales", "codes") for _, st, _ in bad)
    assert all(len(f["minimal"]) <= 32 for _, _, f in bad)


def test_modelopt_nvfp4_fake_quant_runs_and_is_judged():
    from harness.conformance.adapters.modelopt import modelopt_nvfp4_fake

    data = run_conformance([_impl(modelopt_nvfp4_fake)], device="cuda", dtypes=(torch.bfloat16,), random_blocks=32)
    assert data["cells"] and all(c["stages"]["qdq"]["status"] == "ok" for c in data["cells"])
    assert all(len(f["minimal"]) <= 32 for _, _, f in _unexplained(data))
