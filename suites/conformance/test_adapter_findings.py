"""Shipped adapters (torchao 0.18, compressed-tensors): the known divergences
(docs/numerics.md) and the ones conform found are shrunk and explained by the registry;
without the registry the same run fails."""
import pytest
import torch

from harness.conformance import run_conformance
from harness.conformance import verdict as vd

pytest.importorskip("torchao.prototype.mx_formats", reason="torchao is a test dependency (pyproject [test])")
from harness.conformance.adapters.torchao import torchao_mx, torchao_nvfp4


def _explained(data):
    out = {}
    for c in data["cells"]:
        for s in c["stages"].values():
            for k, v in s.get("explained", {}).items():
                out[k] = out.get(k, 0) + v
            for f in s.get("findings", []):
                if f.get("explained_by"):
                    assert len(f["minimal"]) <= 32 and f["verdict"] == vd.IMPL_WRONG, f
    return out


def test_torchao_mx_divergences_explained():
    impl = torchao_mx()
    impl.scale_modes = ("floor", "rceil")
    data = run_conformance([impl], formats=["mxfp4"], dtypes=(torch.float32,), random_blocks=32)
    assert not data["failed"]
    seen = _explained(data)
    assert seen.get("torchao-mx-byte0-quantized-at-2^-126", 0) > 0
    assert seen.get("torchao-mx-rceil-float32-log2", 0) > 0
    assert seen.get("torchao-mx-rceil-byte0-block-unscaled", 0) > 0
    bare = run_conformance([impl], formats=["mxfp4"], dtypes=(torch.float32,), random_blocks=32, registry=())
    assert bare["failed"]


def test_torchao_nvfp4_block_scale_floor_explained():
    data = run_conformance([torchao_nvfp4()], dtypes=(torch.bfloat16,), random_blocks=32)
    assert not data["failed"]
    assert _explained(data).get("torchao-nvfp4-block-scale-floor", 0) > 0
    cell = data["cells"][0]
    assert cell["stages"]["scales"]["match_rate"] < 1.0


def test_compressed_tensors_nvfp4_divergences_explained():
    pytest.importorskip("compressed_tensors", reason="compressed-tensors is optional (the conformance extra)")
    from harness.conformance.adapters.compressed_tensors import compressed_tensors_nvfp4

    data = run_conformance([compressed_tensors_nvfp4()], dtypes=(torch.bfloat16,), random_blocks=32)
    assert not data["failed"]
    seen = _explained(data)
    for entry in ("compressed-tensors-zero-block-scale-eps", "compressed-tensors-divides-by-block-scale",
                  "compressed-tensors-drops-negative-zero"):
        assert seen.get(entry, 0) > 0, (entry, seen)
    # x / s an exact E2M1 midpoint: the convention's fl(gs / s) breaks the tie
    # (reference right by the convention), real arithmetic keeps it (CT right).
    f = next(f for c in data["cells"] for f in c["stages"]["codes"]["findings"]
             if f["explained_by"] == "compressed-tensors-divides-by-block-scale")
    assert f["verdict"] == vd.IMPL_WRONG and f["real_arithmetic_verdict"] == vd.REF_WRONG
