"""The fused GEMM's epilogue (HAS_BIAS, ROW_SCALE) gives the bits of the torch
ops it replaces: `h + bias.index_select(0, ids)` then `h * row_scale[:, None]`,
one float32 operation each, in that order. Checked against moe_gemm's own
GEMM without them followed by those ops, bit for bit: in the kernel (one K
split), and on the host where the launch leaves them (a K split; the bias
after nvfp4's post factor). CPU (interpreter) and GPU."""
from __future__ import annotations

import pytest
import torch

import harness.moe as hm
from harness.kernels import fused_gemm
from harness.kernels import launch_config as lc
from harness.kernels.fused_weights import FusedWeights
from harness.testing.checks.bitwise import assert_bitwise_equal

E, N, K = 4, 48, 64


def _case(scheme: str, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(E, N, K, generator=g) * K ** -0.5
    q, gs = hm.quantize_expert_weights(w.to(device), scheme)
    fw = FusedWeights.from_quantized(q, gs)
    T, k = 9, 2
    x = torch.randn(T, K, generator=g)
    # experts with 0, 1 and many pairs (several BLOCK_M blocks, padding rows)
    ids = torch.tensor([0, 2, 2, 2, 3, 2, 0, 2, 2, 3, 2, 2, 0, 2, 2, 2, 3, 2])
    bias = torch.randn(E, N, generator=g) * 4
    rs = torch.rand(T * k, generator=g)
    rs[3] = 0.0
    rs[5] = -0.0
    rs[7] = 3.0e38  # products overflow to +-Inf
    return fw, x.to(device), ids.to(device), bias.to(device), rs.to(device), k


def _check(scheme, device, precision, config=None, mode="fused", **kw):
    fw, x, ids, bias, rs, k = _case(scheme, device)
    if precision == "bf16" and fw.two_level:
        kw["a_gscale"] = torch.tensor(1.0, device=device)
    base = fused_gemm.moe_gemm(x, ids, fw, precision=precision, mode=mode, x_row_div=k, config=config, **kw)
    for b, r in ((bias, None), (None, rs), (bias, rs)):
        got = fused_gemm.moe_gemm(x, ids, fw, precision=precision, mode=mode, x_row_div=k, config=config,
                                  bias=b, row_scale=r, **kw)
        want = base
        if b is not None:
            want = want + b.index_select(0, ids)
        if r is not None:
            want = want * r[:, None]
        assert_bitwise_equal(got.cpu(), want.cpu(), f"{scheme} {precision} {mode} {config} bias={b is not None} "
                                                    f"row_scale={r is not None}")


def _flags(scheme, vendor, precision, split_k, bias=True, row_scale=True):
    two_level = hm.get_scheme(scheme).two_level
    cfg = lc.select_launch("gemm", vendor, kind=1, fmt="nvfp4" if two_level else "mxfp4", bf16=precision == "bf16",
                           has_post=precision == "bf16" and two_level, block_m=16, n=N, k=4096,
                           bias=bias, row_scale=row_scale, override=dict(SPLIT_K=split_k))
    return cfg.HAS_BIAS, cfg.ROW_SCALE


def test_which_launch_does_its_epilogue():
    """In the kernel with one split; on the host after a K split; the bias
    (and so the row scale after it) on the host after a post factor."""
    assert _flags("w_mxfp4", "cuda", "bf16", 1) == (True, True)
    assert _flags("w_mxfp4", "cuda", "bf16", 2) == (False, False)
    assert _flags("nvfp4", "cuda", "bf16", 1) == (False, False)
    assert _flags("nvfp4", "cuda", "bf16", 1, bias=False) == (False, True)
    assert _flags("nvfp4", "cuda", "ieee", 1) == (True, True)
    assert _flags("w_mxfp4", "interpreter", "ieee", 1, row_scale=False) == (True, False)


@pytest.mark.parametrize("mode", ["fused", "predequant"])
@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("scheme", ["w_mxfp4", "nvfp4"])
def test_epilogue_is_the_torch_ops_bitwise(scheme, split_k, mode):
    """Mode "fused" (codes decoded in the K loop) and "predequant" (the GEMM
    on the dequantized scratch) share the epilogue."""
    _check(scheme, "cpu", "ieee", config=dict(SPLIT_K=split_k, BLOCK_N=16, BLOCK_K=32), mode=mode)


def test_epilogue_arguments_are_checked():
    fw, x, ids, bias, rs, k = _case("w_mxfp4", "cpu")
    with pytest.raises(ValueError, match=r"bias must be float32 \[E, N\]"):
        fused_gemm.moe_gemm(x, ids, fw, x_row_div=k, bias=bias[:, :-1])
    with pytest.raises(ValueError, match=r"row_scale must be float32 \[P\]"):
        fused_gemm.moe_gemm(x, ids, fw, x_row_div=k, row_scale=rs.double())


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["fused", "predequant"])
@pytest.mark.parametrize("precision", ["ieee", "bf16"])
@pytest.mark.parametrize("scheme", ["w_mxfp4", "nvfp4"])
def test_epilogue_is_the_torch_ops_bitwise_gpu(scheme, precision, mode, gpu_device):
    """The tuned launch (its own K split, none at this size) and a forced
    split of two, in both modes."""
    _check(scheme, gpu_device, precision, mode=mode)
    _check(scheme, gpu_device, precision, config=dict(SPLIT_K=2), mode=mode)


def _split_sum_case(device):
    """Partials whose float32 sum depends on the order (a large term and
    cancellations), +-0, Inf and NaN; biases and row scales as in _case."""
    g = torch.Generator().manual_seed(11)
    S, P, N_ = 3, 5, 37  # P * N not a multiple of the block: a masked tail
    part = torch.randn(S, P, N_, generator=g)
    part[0, 0] = 1.0  # (1 + 1e8) - 1e8 = 0 in float32; the reverse order gives 1
    part[1, 0] = 1.0e8
    part[2, 0] = -1.0e8
    part[:, 1, :3] = torch.tensor([[0.0, -0.0, float("inf")], [-0.0, -0.0, 1.0], [-0.0, 0.0, float("nan")]]).T
    ids = torch.randint(0, E, (P,), generator=g)
    bias = torch.randn(E, N_, generator=g) * 4
    rs = torch.rand(P, generator=g)
    rs[2] = -0.0
    return part.to(device), ids.to(device), bias.to(device), rs.to(device)


def _sequential(part, ids, bias, rs):
    want = part[0].clone()
    for s in range(1, part.shape[0]):
        want = want + part[s]
    if bias is not None:
        want = want + bias.index_select(0, ids)
    if rs is not None:
        want = want * rs[:, None]
    return want


def _split_sum_matches(device):
    part, ids, bias, rs = _split_sum_case(device)
    interpret = lc.vendor_of(device) == "interpreter"
    for b, r in ((None, None), (bias, None), (None, rs), (bias, rs)):
        out = torch.empty(part.shape[1:], dtype=torch.float32, device=device)
        got = fused_gemm._split_sum(part, out, ids, b, r, interpret)
        assert_bitwise_equal(got.cpu(), _sequential(part, ids, b, r).cpu(), f"bias={b is not None} rs={r is not None}")
    assert not torch.equal(_sequential(part.flip(0), ids, None, None)[0, 0], _sequential(part, ids, None, None)[0, 0])


def test_split_sum_adds_the_partials_in_split_order_then_the_epilogue():
    """The K-split epilogue (one launch): the partials summed in split order,
    then + bias[ids] and * row_scale, each one float32 operation, bit for
    bit that sequence of torch ops (and not the reverse order, which the
    case tells apart)."""
    _split_sum_matches("cpu")


@pytest.mark.gpu
def test_split_sum_adds_the_partials_in_split_order_then_the_epilogue_gpu(gpu_device):
    _split_sum_matches(gpu_device)
