"""triton_kernels' W4A16 MXFP4 MoE adapter (harness/conformance/moe/triton_kernels_moe.py).
On CPU: it is reported Unavailable with its reason, and its weight
conversion (transpose to the contraction axis, FP4 wrap, scale padding) is
checked on the strided layout: decoding what it hands triton_kernels gives
back the truth's weights. On a CUDA GPU: every check runs on it."""
import json

import pytest
import torch

import harness.formats as hf
from harness import cli
from harness.conformance.moe import Unavailable
from harness.conformance.moe import problems as pb
from harness.conformance.moe import triton_kernels_moe as tkm
from harness.conformance.moe.checks import CHECK_NAMES


def _tk():
    try:
        return tkm.load(tkm.locate()[0])
    except Unavailable as e:
        pytest.skip(str(e))


def test_unavailable_reasons(monkeypatch, tmp_path):
    monkeypatch.setenv(tkm.ENV, str(tmp_path))
    with pytest.raises(Unavailable, match=f"{tkm.ENV}={tmp_path}: no triton_kernels package there"):
        tkm.triton_kernels_w4a16()
    monkeypatch.delenv(tkm.ENV)
    if not torch.cuda.is_available():
        with pytest.raises(Unavailable, match="needs a CUDA GPU|triton_kernels not found"):
            tkm.triton_kernels_w4a16()


@pytest.mark.parametrize("layouts", ["strided", "hopper"])
def test_weight_conversion_round_trips(layouts):
    """What the adapter hands matmul_ogs, unswizzled and decoded, is the
    truth's weights: on the strided layout and on the sm_90 (Hopper) value and
    scale layouts the H200 uses (their swizzles are torch code: CPU runs them)."""
    tk = _tk()
    vl, sl = {"strided": ((tk.StridedLayout, {}), (tk.StridedLayout, {})),
              "hopper": ((tk.layout.HopperMXValueLayout, {"mx_axis": 1}),
                         (tk.layout.HopperMXScaleLayout, {"mx_axis": 1, "num_warps": 8}))}[layouts]
    p = pb.make_problem(tkm.SCHEME, "random", "softmax_renorm", "swiglu_clamp", "bfloat16", 0, E=3, H=128, I=96, T=2)
    inst = pb.materialize(p, tkm.CONVENTIONS)
    for name, q, interleaved in (("w13", inst.truth.w13_q, True), ("w2", inst.truth.w2_q, False)):
        w, s = tkm.kernel_operands(tk, inst.weights[f"{name}_weight"], inst.weights[f"{name}_weight_scale"], vl, sl,
                                   tkm.HOPPER_SCALE_K_MULTIPLE)
        E, N, K = q.codes.shape
        assert list(w.shape) == [E, K, N] and w.dtype == tk.FP4  # contraction axis on dim 1, as matmul_ogs reads
        data = w.storage.layout.unswizzle_data(w.storage.data)[:, :K // 2, :N]
        scales = s.storage.layout.unswizzle_data(s.storage.data)[:, :, :N]
        assert scales.shape[1] >= -(-K // 32 // 4) * 4  # K blocks padded (and the layout's own padding)
        codes = hf.unpack_fp4(data.transpose(-2, -1))
        got = hf.dequantize(hf.QuantizedTensor(codes, scales[:, :K // 32].transpose(-2, -1).contiguous(), None,
                                               "mxfp4"))
        if interleaved:  # gate i at row 2i, up i at 2i + 1: what swiglu_fn splits
            got = torch.cat([got[:, 0::2], got[:, 1::2]], dim=1)
        assert torch.equal(got, hf.dequantize(q)), name


@pytest.mark.gpu
@pytest.mark.cuda
def test_every_check_runs_on_triton_kernels(tmp_path):
    _tk()
    rc = cli.main(["conform", "--moe", "triton-kernels-w4a16", "--device", "cuda", "--reports", str(tmp_path)])
    data = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert rc in (0, 1) and not data["skipped"], data["skipped"]
    assert {r["check"] for r in data["results"]} == set(CHECK_NAMES)
    assert not [r for r in data["results"] if r["status"] == "error"], [
        (r["check"], r["message"]) for r in data["results"] if r["status"] == "error"]
