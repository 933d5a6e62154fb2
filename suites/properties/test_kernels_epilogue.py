"""The fused GEMM's epilogue (HAS_BIAS, ROW_SCALE) gives the bits of the torch
ops it replaces: `h + bias.index_select(0, ids)` then `h * row_scale[:, None]`,
one float32 operation each, in that order. Checked against moe_gemm's own
GEMM without them followed by those ops, bit for bit: in the kernel (one K
split), and in the split-sum pass where the launch leaves them (a K split;
the bias after nvfp4's post factor). CPU (interpreter) and GPU."""
from __future__ import annotations

import numpy as np
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
    """In the kernel with one split; in the split-sum pass after a K split;
    the bias (and so the row scale after it) there after a post factor."""
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


# GEMM1's activation (moe_gemm's act): the kernel's epilogue where the launch holds the bias, else the split-sum
# pass; either way the activation of what the GEMM alone returns (+ bias), rounded once to act_dtype
I_ACT = 24  # the activation's columns: weights of 2 I_ACT rows, gate then up


def _np_act(h: torch.Tensor, act: str) -> torch.Tensor:
    """The interpreter's bits of fused_act_src._act on h [P, 2I] float32: its
    float32 operations in their order, the exponential numpy's float32 exp
    (the interpreter has no libdevice; the GPU test checks libdevice's
    against the one-pass kernel)."""
    h = h.numpy()
    gate, up = h[:, :h.shape[1] // 2], h[:, h.shape[1] // 2:]
    one = np.float32(1.0)
    if act == "silu":
        return torch.from_numpy((gate / (one + np.exp(-gate))) * up)
    limit, alpha = np.float32(lc.SWIGLU_LIMIT), np.float32(lc.SWIGLU_ALPHA)
    gate = np.where(np.isnan(gate), gate, np.minimum(gate, limit))
    up = np.where(np.isnan(up), up, np.minimum(np.maximum(up, -limit), limit))
    sig = one / (one + np.exp(-(alpha * gate)))
    return torch.from_numpy((up + one) * (gate * sig))


def _act_case(scheme: str, device, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(E, 2 * I_ACT, K, generator=g) * K ** -0.5
    q, gs = hm.quantize_expert_weights(w.to(device), scheme)
    fw = FusedWeights.from_quantized(q, gs)
    T, k = 9, 2
    x = torch.randn(T, K, generator=g) * 4  # sums past the clamp's 7, both signs
    ids = torch.tensor([0, 2, 2, 2, 3, 2, 0, 2, 2, 3, 2, 2, 0, 2, 2, 2, 3, 2])
    bias = torch.randn(E, 2 * I_ACT, generator=g) * 4
    return fw, x.to(device), ids.to(device), bias.to(device), k


@pytest.mark.parametrize("mode", ["fused", "predequant"])
@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("scheme", ["w_mxfp4", "nvfp4"])
def test_the_activation_is_that_of_the_gemms_result(scheme, split_k, mode):
    """act silu / swiglu_clamp, with and without the bias: the [P, I] result
    is the activation of the GEMM's own [P, 2I] result (+ bias), gate then
    up, bit for bit; one split puts it in the kernel's epilogue (a tile of
    BLOCK_N / 2 gate rows and the up rows I further on), two in the
    split-sum pass."""
    fw, x, ids, bias, k = _act_case(scheme, "cpu")
    config = dict(SPLIT_K=split_k, BLOCK_N=16, BLOCK_K=32)
    for b in (None, bias):
        base = fused_gemm.moe_gemm(x, ids, fw, precision="ieee", mode=mode, x_row_div=k, config=config, bias=b)
        assert bool((base.abs() > lc.SWIGLU_LIMIT).any()) and bool((base < 0).any())
        for act in lc.ACT_CODES:
            got = fused_gemm.moe_gemm(x, ids, fw, precision="ieee", mode=mode, x_row_div=k, config=config, bias=b,
                                      act=act)
            assert_bitwise_equal(got, _np_act(base, act), f"{scheme} {mode} split {split_k} {act} bias={b is not None}")


@pytest.mark.parametrize("block_n", [16, 32])
def test_the_transposed_products_activation_is_that_of_the_gemms_result(block_n):
    """The transposed product at BLOCK_M 64 and up (MXFP4 on "mma" words, SWAP_MN) takes gate and up rows of 8
    outputs in turn and applies the activation in its epilogue: the bits of the GEMM's own [P, 2I] result (+ bias)
    put through the activation, gate then up (the interpreter's "ieee" dot; BLOCK_N 32 has two row groups a tile
    and a tile past I, whose rows are masked)."""
    g = torch.Generator().manual_seed(5)
    w = torch.randn(E, 2 * I_ACT, K, generator=g) * K ** -0.5
    q, gs = hm.quantize_expert_weights(w, "w_mxfp4")
    fw = FusedWeights.from_quantized(q, gs, word_order="mma")
    _, x, ids, bias, k = _act_case("w_mxfp4", "cpu")
    config = dict(SPLIT_K=1, BLOCK_N=block_n, BLOCK_K=32, SWAP_MN=True)
    kw = dict(precision="ieee", x_row_div=k, config=config, block_m=64)
    assert lc.select_launch("gemm", "interpreter", kind=1, fmt="mxfp4", bf16=False, block_m=64, n=2 * I_ACT, k=K,
                            act=1, word_order="mma", override=config).ACT == 1
    for b in (None, bias):
        base = fused_gemm.moe_gemm(x, ids, fw, bias=b, **kw)
        for act in lc.ACT_CODES:
            got = fused_gemm.moe_gemm(x, ids, fw, bias=b, act=act, **kw)
            assert_bitwise_equal(got, _np_act(base, act), f"BLOCK_N {block_n} {act} bias={b is not None}")


def _act_flags(scheme, split_k, bias=False, row_scale=False, vendor="cuda", word_order="k", block_m=16):
    two_level = hm.get_scheme(scheme).two_level
    cfg = lc.select_launch("gemm", vendor, kind=1, fmt="nvfp4" if two_level else "mxfp4", bf16=True,
                           has_post=two_level, block_m=block_m, n=2 * I_ACT, k=4096, bias=bias, row_scale=row_scale,
                           act=lc.ACT_CODES["silu"], override=dict(SPLIT_K=split_k), word_order=word_order)
    return cfg.ACT


def test_which_launch_applies_the_activation():
    """In the kernel where it holds every operation before the activation:
    one split, and the bias not after a post factor, and not in the
    transposed product's decode rows (act_in_epilogue: MXFP4's "mma" words
    on CUDA, BLOCK_M below 64); else none there (the split-sum pass applies it)."""
    assert _act_flags("w_mxfp4", 1) == lc.ACT_CODES["silu"]
    assert _act_flags("w_mxfp4", 1, bias=True, row_scale=True) == lc.ACT_CODES["silu"]
    assert _act_flags("w_mxfp4", 2) == 0
    assert _act_flags("nvfp4", 1) == lc.ACT_CODES["silu"]
    assert _act_flags("nvfp4", 1, bias=True) == 0
    for bm in (16, 32, 64, 128):
        assert _act_flags("w_mxfp4", 1, word_order="mma", block_m=bm) == (lc.ACT_CODES["silu"] if bm >= 64 else 0)
        assert _act_flags("w_mxfp4", 1, word_order="mma", block_m=bm, vendor="rocm") == lc.ACT_CODES["silu"]
    assert _act_flags("w_mxfp4", 1, bias=True, word_order="mma", block_m=128) == lc.ACT_CODES["silu"]
    assert _act_flags("w_mxfp4", 2, word_order="mma", block_m=128) == 0
    assert lc.select_launch("gemm", "cuda", kind=1, fmt="mxfp4", bf16=True, block_m=16, n=48, k=64).ACT == 0
    assert lc.act_constexprs(lc.ACT_CODES["swiglu_clamp"]) == dict(ACT=2, ACT_LIMIT=7.0, ACT_ALPHA=1.702)
    with pytest.raises(ValueError, match="unknown activation code 3"):
        lc.select_launch("gemm", "cuda", kind=1, fmt="mxfp4", bf16=True, block_m=16, n=48, k=64, act=3)
    with pytest.raises(ValueError, match="activation code 1 needs a GEMM launch with an even BLOCK_N"):
        lc.select_launch("dequant", "cuda", kind=1, fmt="mxfp4", n=48, k=64, act=1)


def test_activation_arguments_are_checked():
    fw, x, ids, bias, k = _act_case("w_mxfp4", "cpu")
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        fused_gemm.moe_gemm(x, ids, fw, x_row_div=k, act="gelu")
    with pytest.raises(ValueError, match="writes float32 or bfloat16, got torch.float16"):
        fused_gemm.moe_gemm(x, ids, fw, x_row_div=k, act="silu", act_dtype=torch.float16)
    with pytest.raises(ValueError, match="the Triton interpreter .* does not round float32 to bf16"):
        fused_gemm.moe_gemm(x, ids, fw, x_row_div=k, act="silu", act_dtype=torch.bfloat16)
    odd = FusedWeights.from_float(torch.zeros(E, 2 * I_ACT + 1, K))
    with pytest.raises(ValueError, match=r"needs weights of 2I rows \(gate then up\), got N=49"):
        fused_gemm.moe_gemm(x, ids, odd, x_row_div=k, act="silu")


def _act_matches_the_one_pass_kernel(scheme, device, precision, mode, config, case):
    from harness.kernels import fused_act

    fw, x, ids, bias, k = case
    kw = dict(precision=precision, mode=mode, x_row_div=k, config=config)
    if precision == "bf16" and fw.two_level:
        kw["a_gscale"] = torch.tensor(1.0, device=device)
    for b in (None, bias):
        base = fused_gemm.moe_gemm(x, ids, fw, bias=b, **kw)
        for act, one_pass in fused_act.ACTIVATIONS.items():
            for dt in (torch.float32, torch.bfloat16):
                got = fused_gemm.moe_gemm(x, ids, fw, bias=b, act=act, act_dtype=dt, **kw)
                assert_bitwise_equal(got.cpu(), one_pass(base, dt).cpu(),
                                     f"{scheme} {precision} {mode} {config} {act} {dt} bias={b is not None}")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["fused", "predequant"])
@pytest.mark.parametrize("precision", ["ieee", "bf16"])
@pytest.mark.parametrize("scheme", ["w_mxfp4", "nvfp4"])
def test_the_activation_is_the_one_pass_kernels_gpu(scheme, precision, mode, gpu_device):
    """On the GPU the activation is fused_act's one-pass kernel on the
    GEMM's result (itself the bits of the torch ops, test_moe_gpu), in
    float32 and rounded to bf16: the tables' launch (one split: the
    epilogue) and a forced split of two (the split-sum pass)."""
    case = _act_case(scheme, gpu_device)
    for config in (None, dict(SPLIT_K=2)):
        _act_matches_the_one_pass_kernel(scheme, gpu_device, precision, mode, config, case)


@pytest.mark.gpu
@pytest.mark.parametrize("scheme", ["w_mxfp4", "nvfp4", "w_mxfp8"])
def test_the_activation_at_prefill_tiles_is_the_one_pass_kernels_gpu(scheme, gpu_device):
    """The prefill launches (BLOCK_M 128: the transposed product on MXFP4,
    its epilogue's rows gate and up of 8 outputs in turn, 64 x 64 under scale
    order "n"; untransposed on NVFP4 and MXFP8) on 2048 pairs of 8 experts, I = 192
    and K = 2048 (scale rows of 64 bytes) or 2880 (gpt-oss-120b's K: "n"
    for MXFP4), in precision "bf16", mode "fused"."""
    g = torch.Generator(device=gpu_device).manual_seed(7)
    E8, I, T, k = 8, 192, 1024, 2
    for K_ in (2048, 2880):
        w = torch.randn(E8, 2 * I, K_, generator=g, device=gpu_device) * K_ ** -0.5
        q, gs = hm.quantize_expert_weights(w, scheme)
        fw = FusedWeights.from_quantized(q, gs)
        x = torch.randn(T, K_, generator=g, device=gpu_device) * 4
        ids = torch.topk(torch.randn(T, E8, generator=g, device=gpu_device), k, dim=1).indices.reshape(-1)
        bias = torch.randn(E8, 2 * I, generator=g, device=gpu_device) * 4
        _act_matches_the_one_pass_kernel(scheme, gpu_device, "bf16", "fused", None, (fw, x, ids, bias, k))
