"""The fused MoE GEMM decodes weights exactly like the reference (CPU, Triton
interpreter): every row of the format table x every element code x every
scale byte, global scales for the two-level rows, under every decode flag the
launch tables can pick. Zero tolerance: bit patterns compared, NaN == NaN.

Its dequant-only launch (mode "predequant", `fused_dequantize`) is compared
with harness.formats.dequantize over all of them; the GEMM launch (mode
"fused") with one-hot activation rows, which pick single weights out of the
dot product exactly (finite codes only: 0 * Inf is NaN).
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import harness.formats as hf
from harness.kernels import fused_gemm
from harness.kernels import launch_config as lc
from harness.kernels.fused_weights import FusedWeights, plain_scale_bytes
from harness.testing.checks.bitwise import assert_bitwise_equal

# Encode-side global scales of the two-level rows, one per expert: 1, a
# generic value, and two that push fl32(s / gs) to float32's extremes
# (subnormal multipliers, products near the top of the range).
TWO_LEVEL_GS = (1.0, 2688.0 / 7.25, 3.0e35, 1.0e-30)
# Launch flags of the weight decode: how a code becomes a float32 (FAST_DECODE)
# and how bytes and multipliers are loaded (MULT_BCAST, PACK_JOIN, which the
# tuned tables set together).
DECODE_FLAGS = [dict(FAST_DECODE=f, MULT_BCAST=m, PACK_JOIN=m) for f, m in itertools.product((False, True), repeat=2)]
# e2m1 rows: values from each pair's bits in the word layout (BYTE_DECODE); the other rows ignore the flag
DECODE_FLAGS.append(dict(FAST_DECODE=True, MULT_BCAST=True, PACK_JOIN=True, BYTE_DECODE=True))


def _flag_id(flags):
    return "-".join(k.lower() for k, v in flags.items() if v) or "plain"


def every_code_and_scale(fmt: str, reps: int = 1) -> hf.QuantizedTensor:
    """Codes [E, 256, K] (K the shortest row that holds the pattern, times
    `reps`): row n holds code (k + n) % n_codes at k, every
    element code (cycled; in fp4's eight-code words, every code in every
    position of a word across rows), and block b of row n has scale byte
    (n + 37 b) % 256, so each code meets each of the 256 scale bytes (E8M0
    0..254 and the NaN byte 255; for E4M3 scales every byte: subnormals,
    negatives, NaN) in every block position."""
    spec = hf.FORMATS[fmt]
    n_codes = 1 << spec.element.width
    K = math.lcm(n_codes, 2 * spec.block_size) * reps
    E = 1 if spec.is_mx else len(TWO_LEVEL_GS)
    codes = ((torch.arange(K) + torch.arange(256)[:, None]) % n_codes).to(torch.uint8).expand(E, 256, K).contiguous()
    blocks = K // spec.block_size
    scales = ((torch.arange(256).reshape(256, 1) + 37 * torch.arange(blocks)) % 256).to(torch.uint8)
    gs = None if spec.is_mx else torch.tensor(TWO_LEVEL_GS, dtype=torch.float32).reshape(E, 1)
    return hf.QuantizedTensor(codes, scales.expand(E, 256, blocks).contiguous(), gs, fmt)


def _fused_weights(q: hf.QuantizedTensor, scale_order=None) -> FusedWeights:
    fw = FusedWeights.from_quantized(q, None if q.global_scale is None else q.global_scale.reshape(-1),
                                     scale_order=scale_order)
    assert scale_order is None or fw.scale_order == scale_order
    return fw


# the scale bytes' two orders (launch_config.scale_order): every_code_and_scale's rows of 2-8 blocks take "n"
SCALE_ORDERS = ("k", "n")
# on the device also rows of 16-64 blocks in order "k" (every_code_and_scale's K times 8): rows a multiple of 16
# bytes, whose scale tiles load as vectors and are pipelined like the words (Mixtral's and Qwen3's layout)
GPU_SCALE_LAYOUTS = [("k", 1), ("n", 1), ("k", 8)]
# the GEMM's too: K 2048 for MXFP4 at reps 32, where the table's launch is "large_long_k"; K 2112 at reps 33 in
# order "n" (gpt-oss' layout), read to 2304 on CUDA (launch_config.read_k): "large_long_k", K_OVERREAD
GPU_GEMM_LAYOUTS = GPU_SCALE_LAYOUTS + [("k", 32), ("n", 33)]


MX_FORMATS = [f for f in hf.FORMAT_NAMES if hf.FORMATS[f].is_mx]
# (format, plain scale bytes only): every format as it comes, and the MX rows restricted to plain_bytes_only
FORMATS_PLAIN = [(f, False) for f in hf.FORMAT_NAMES] + [(f, True) for f in MX_FORMATS]


def plain_bytes_only(q: hf.QuantizedTensor) -> hf.QuantizedTensor:
    """q restricted to what FusedWeights.plain_scales allows: bytes above
    128 moved down by 127 (129..255 -> 2..128), and every code of a block
    whose byte is 0 set to +0 or -0 (alternating along K), so every other
    code still meets every byte in [1, 128] and byte 0 meets both zeros."""
    spec = q.spec
    scales = torch.where(q.scales > 128, q.scales.int() - 127, q.scales.int()).to(torch.uint8)
    zero = (scales == 0).repeat_interleave(spec.block_size, -1)
    signed_zero = ((torch.arange(q.codes.shape[-1]) % 2) * spec.element.sign_bit).to(torch.uint8)
    codes = torch.where(zero, signed_zero.to(q.codes.device), q.codes).to(torch.uint8)
    return hf.QuantizedTensor(codes, scales, q.global_scale, q.fmt)


@pytest.mark.parametrize("order", SCALE_ORDERS)
@pytest.mark.parametrize("flags", DECODE_FLAGS, ids=_flag_id)
@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
def test_fused_dequantize_every_code_and_scale_byte(fmt, flags, order):
    q = every_code_and_scale(fmt)
    got = fused_gemm.fused_dequantize(_fused_weights(q, order), dict(flags))
    assert_bitwise_equal(got, hf.dequantize(q), f"{fmt} {flags} scale order {order}")


@pytest.mark.parametrize("order", SCALE_ORDERS)
@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
def test_fused_gemm_picks_out_every_finite_weight(fmt, order):
    """x = the identity: row k of x @ W[e].T is column k of W[e], exactly
    (one product by 1, the others +-0), so the GEMM launch's in-loop decode is
    checked value by value. Weights that are not finite (special codes,
    products past float32's range) become code 0 and NaN scales 1.0 here;
    the dequant-only test covers them."""
    _assert_one_hot_rows_pick_out_each_weight(_finite_only(every_code_and_scale(fmt)),
                                              lambda q: _fused_weights(q, order))


def _finite_only(q: hf.QuantizedTensor) -> hf.QuantizedTensor:
    """q with the codes whose weights are not finite set to code 0 and NaN
    scale bytes set to 1.0 (0 * Inf is NaN in a dot product)."""
    fmt = q.fmt
    nan_scale = torch.isnan(hf.dequantize(hf.QuantizedTensor(torch.zeros_like(q.codes), q.scales, q.global_scale,
                                                              fmt)))[..., ::q.spec.block_size]
    scales = torch.where(nan_scale, 127 if q.spec.is_mx else 0x38, q.scales).to(torch.uint8)  # 1.0
    finite = torch.isfinite(hf.dequantize(hf.QuantizedTensor(q.codes, scales, q.global_scale, fmt)))
    return hf.QuantizedTensor(torch.where(finite, q.codes, 0).to(torch.uint8), scales, q.global_scale, fmt)


def _assert_one_hot_rows_pick_out_each_weight(q, build, extra=({},)):
    """x = the identity, so row k of x @ W[e].T is column k of W[e], exactly
    (one product by 1, the others +-0): the GEMM launch's in-loop decode,
    value by value, under the interpreter's row and the tuned decode flags,
    each with every launch setting of `extra`."""
    want = hf.dequantize(q)  # [E, N, K]
    E, N, K = want.shape
    x = torch.eye(K).repeat(E, 1)
    ids = torch.arange(E).repeat_interleave(K)
    fw = build(q)
    fast = dict(FAST_DECODE=True, MULT_BCAST=True, PACK_JOIN=True, BLOCK_N=32, BLOCK_K=64)
    for config in (None, fast, dict(fast, BYTE_DECODE=True)):
        for more in extra:
            cfg = dict(config or {}, **more) or None
            y = fused_gemm.moe_gemm(x, ids, fw, precision="ieee", mode="fused", config=cfg).reshape(E, K, N)
            w = want.transpose(1, 2)
            nonzero = w != 0
            assert_bitwise_equal(y[nonzero], w[nonzero], f"{q.fmt} {cfg}")
            assert bool((y[~nonzero] == 0).all()), f"{q.fmt} {cfg}: zero weights gave nonzero outputs"


@pytest.mark.gpu
@pytest.mark.parametrize("order,reps", GPU_SCALE_LAYOUTS)
@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
def test_fused_dequantize_every_code_and_scale_byte_gpu(fmt, order, reps, gpu_device):
    """The same on the device, with the tuned tables' configuration too:
    FAST_DECODE is exact only where the target keeps float32 denormals."""
    q = every_code_and_scale(fmt, reps)
    want = hf.dequantize(q)
    qd = hf.QuantizedTensor(q.codes.to(gpu_device), q.scales.to(gpu_device),
                            None if q.global_scale is None else q.global_scale.to(gpu_device), fmt)
    fw = _fused_weights(qd, order)
    for flags in [None] + DECODE_FLAGS:
        got = fused_gemm.fused_dequantize(fw, None if flags is None else dict(flags)).cpu()
        assert_bitwise_equal(got, want, f"{fmt} {flags or 'tuned table'} scale order {order}")


# ---- BF16_DECODE: packed e2m1 built and scaled in bf16 (GPU tables; the
# interpreter's bf16 arithmetic is wrong, so the checks of its bits run on
# the device and the CPU suite checks where the flag may act).


def _bf16_operands(q: hf.QuantizedTensor) -> torch.Tensor:
    """What precision "bf16" feeds the dot: MX values e x 2^k, nvfp4's e x s
    with the raw E4M3 s (1/gs is applied after the dot), each exact in
    float32 and rounded once to bf16."""
    if q.global_scale is not None:
        q = hf.QuantizedTensor(q.codes, q.scales, torch.ones_like(q.global_scale), q.fmt)
    return hf.dequantize(q).to(torch.bfloat16)


def test_bf16_decode_acts_only_where_multipliers_are_exact_in_bf16():
    """The GEMM tables carry BF16_DECODE (the dequant-only pass measured
    slower with it); the selector keeps it for bf16 operands only and, in
    the dequant pass, for a bf16 output only: "ieee" multipliers fl32(s / gs)
    are not exact in bf16."""
    for row in ("small", "small_short_k", "large"):
        assert lc.GPU_CONFIGS[row].BF16_DECODE is True, row
    kw = dict(has_post=False, block_m=16, n=64, k=256)
    assert lc.select_launch("gemm", "cuda", kind=1, fmt="nvfp4", bf16=True, **kw).BF16_DECODE is True
    assert "BF16_DECODE" not in lc.select_launch("gemm", "cuda", kind=1, fmt="nvfp4", bf16=False, **kw).meta()
    assert "BF16_DECODE" not in lc.select_launch("gemm", "cuda", kind=0, bf16=True, w_bytes=2, **kw).meta()
    on = dict(BF16_DECODE=True)
    assert lc.select_launch("dequant", "cuda", kind=1, fmt="mxfp4", n=64, k=512, bf16=True, override=on).BF16_DECODE
    assert "BF16_DECODE" not in lc.select_launch("dequant", "cuda", kind=1, fmt="mxfp4", n=64, k=512,
                                                 override=on).meta()


def test_short_k_loops_take_the_short_k_tile():
    """K <= SHORT_K_MAX (Qwen3's GEMM2) takes BLOCK_K 128 at decode sizes;
    longer K, BLOCK_M >= 64 and ROCm float32 operands keep their tables."""
    def tile(vendor="cuda", **kw):
        args = dict(kind=1, fmt="mxfp4", bf16=True, has_post=False, block_m=16, n=2048, k=768)
        args.update(kw)
        c = lc.select_launch("gemm", vendor, **args)
        return c.BLOCK_N, c.BLOCK_K
    short, small = lc.GPU_CONFIGS["small_short_k"], lc.GPU_CONFIGS["small"]
    assert tile() == (short.BLOCK_N, short.BLOCK_K) != (small.BLOCK_N, small.BLOCK_K)
    assert tile(k=lc.SHORT_K_MAX + 32) == (small.BLOCK_N, small.BLOCK_K)
    assert tile(block_m=128)[1] == lc.GPU_CONFIGS["large"].BLOCK_K
    rocm = lc.ROCM_F32_CONFIGS["small"]
    assert tile("rocm", bf16=False) == (rocm.BLOCK_N, rocm.BLOCK_K)


def test_a_k_tail_masks_only_its_last_block_k():
    """A GEMM whose K leaves a tail of its row's BLOCK_K keeps that BLOCK_K
    and takes K_TAIL (gpt-oss: K 2880 = 11 x 256 + 64): masks on the last
    BLOCK_K only. A K without a tail takes EVEN_NK; an N with a tail of
    BLOCK_N masks every BLOCK_K, as does an override's EVEN_NK=False; an
    override may ask for K_TAIL, never with EVEN_NK."""
    def tile(vendor="cuda", **kw):
        args = dict(kind=1, fmt="mxfp4", bf16=True, block_m=16, n=5760, k=2880)
        args.update(kw)
        c = lc.select_launch("gemm", vendor, **args)
        return c.BLOCK_K, c.EVEN_NK, c.K_TAIL
    small = lc.GPU_CONFIGS["small"].BLOCK_K
    assert tile() == (small, False, True)
    assert tile(k=4096) == (small, True, False)
    assert tile(n=5760 + 8) == (small, False, False)  # N's tail: masks on every BLOCK_K
    assert tile(override={"EVEN_NK": False}) == (small, False, False)
    assert tile(override={"EVEN_NK": False, "K_TAIL": True}) == (small, False, True)
    assert tile(override={"BLOCK_K": 128}) == (128, False, True)
    assert tile(block_m=128) == (lc.GPU_CONFIGS["large"].BLOCK_K, True, False)  # 2880 = 45 x 64
    assert tile(kind=0, fmt=None, w_bytes=2)[2]  # float weights too
    assert tile("interpreter", bf16=False, n=48, k=48) == (lc.INTERP_CONFIGS["small"].BLOCK_K, False, True)
    with pytest.raises(ValueError, match="K_TAIL and EVEN_NK"):
        tile(override={"EVEN_NK": True, "K_TAIL": True})


@pytest.mark.gpu
@pytest.mark.parametrize("K", [320, 1056])
def test_gemm_with_a_k_tail_picks_out_every_weight_gpu(K, gpu_device):
    """The tuned launch at a K with a tail of the row's BLOCK_K (320 steps
    down to 64; 1056 = 32 x 33 keeps 256 with masks): one-hot rows give each weight's
    bf16 operand exactly (mxfp4, random codes and scales)."""
    g = torch.Generator().manual_seed(K)
    E, N = 2, 96
    codes = torch.randint(0, 16, (E, N, K), generator=g).to(torch.uint8)
    scales = torch.randint(110, 140, (E, N, K // 32), generator=g).to(torch.uint8)
    q = hf.QuantizedTensor(codes, scales, None, "mxfp4")
    want = _bf16_operands(q).float()
    x = torch.eye(K, device=gpu_device).repeat(E, 1)
    ids = torch.arange(E, device=gpu_device).repeat_interleave(K)
    fw = _fused_weights(hf.QuantizedTensor(codes.to(gpu_device), scales.to(gpu_device), None, "mxfp4"))
    y = fused_gemm.moe_gemm(x, ids, fw, precision="bf16", mode="fused", block_m=16).cpu()
    y = y.reshape(E, K, N).transpose(1, 2)
    nonzero = want != 0
    assert_bitwise_equal(y[nonzero], want[nonzero], f"K={K}")
    assert bool((y[~nonzero] == 0).all())


def test_bf16_decode_refused_on_the_interpreter():
    """Its bf16 multiplies are; with BF16_TRUNC (float32 multiplies, no bf16
    arithmetic) the interpreter runs it (the test below)."""
    q = every_code_and_scale("mxfp4")
    fw = _fused_weights(q)
    with pytest.raises(ValueError, match="BF16_DECODE needs a CUDA/ROCm device"):
        fused_gemm._dequantize(fw, torch.bfloat16, dict(BF16_DECODE=True))
    with pytest.raises(ValueError, match="BF16_DECODE needs a CUDA/ROCm device"):
        lc.select_launch("gemm", "interpreter", kind=1, fmt="mxfp4", bf16=True, block_m=16, n=64, k=64,
                         override=dict(BF16_DECODE=True))
    assert lc.select_launch("gemm", "interpreter", kind=1, fmt="mxfp4", bf16=True, block_m=16, n=64, k=64,
                            override=dict(BF16_DECODE=True, BF16_TRUNC=True)).BF16_TRUNC is True


TRUNC = dict(BF16_DECODE=True, BF16_TRUNC=True)
E2M1_FORMATS = [f for f in hf.FORMAT_NAMES if hf.FORMATS[f].is_fp4]


@pytest.mark.parametrize("fmt", E2M1_FORMATS)
def test_bf16_trunc_dequant_every_code_and_scale_byte(fmt):
    """BF16_TRUNC (ROCm's tables): BF16_DECODE's products computed in float32
    and truncated to their top 16 bits. Exact because each product is a bf16
    number (e2m1 x 2^k, e2m1 x E4M3 s); on the interpreter, every code x
    scale byte of the bf16 dequant pass is bit for bit the reference's value
    rounded once to bf16 (NaN scales, -0.0, subnormal products). The flag
    acts on e2m1 only (BYTE_DECODE's pair bits); the other formats' bf16
    conversion is the interpreter's, which flushes bf16 subnormals (their
    GPU test below)."""
    q = every_code_and_scale(fmt)
    flags = dict(lc.GPU_CONFIGS["small"].settings(), **TRUNC)
    flags = {k: v for k, v in flags.items() if k in lc.DECODE_FLAGS}
    got = fused_gemm._dequantize(_fused_weights(q), torch.bfloat16, flags)
    assert_bitwise_equal(got, _bf16_operands(q), f"{fmt} {flags}")


def test_rocm_code_launches_truncate_where_cuda_multiplies_in_bf16():
    """ROCm's bf16 launches on codes take the H200 rows with BF16_TRUNC (no
    packed bf16 multiply there: docs/targets.md), the dequant pass included;
    CUDA keeps bf16 multiplies; the flag is dropped wherever BF16_DECODE does not act."""
    kw = dict(kind=1, fmt="mxfp4", block_m=16, n=64, k=2048)
    rocm = lc.select_launch("gemm", "rocm", bf16=True, **kw)
    assert (rocm.table, rocm.row, rocm.BF16_DECODE, rocm.BF16_TRUNC) == ("ROCM_BF16_CODE_CONFIGS", "small", True, True)
    small = lc.GPU_CONFIGS["small"]
    assert (rocm.BLOCK_N, rocm.BLOCK_K, rocm.num_warps, rocm.num_stages) == (
        small.BLOCK_N, small.BLOCK_K, small.num_warps, small.num_stages)
    deq = lc.select_launch("dequant", "rocm", bf16=True, **kw)
    assert (deq.BF16_DECODE, deq.BF16_TRUNC) == (True, True)
    assert lc.select_launch("gemm", "cuda", bf16=True, **kw).BF16_TRUNC is None
    for launch in ("gemm", "dequant"):  # "ieee": float32 operands / output, nothing to truncate
        meta = lc.select_launch(launch, "rocm", bf16=False, **kw).meta()
        assert "BF16_TRUNC" not in meta and "BF16_DECODE" not in meta, launch
    assert "BF16_TRUNC" not in lc.select_launch("gemm", "cuda", bf16=True, override=dict(BF16_TRUNC=True,
                                                                                         BF16_DECODE=False),
                                                **kw).meta()


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,plain", FORMATS_PLAIN)
def test_bf16_dequant_every_code_and_scale_byte_gpu(fmt, plain, gpu_device):
    """The bf16 scratch of mode predequant, with the tables' BF16_DECODE and
    without it: bit for bit the reference's values rounded once to bf16, for
    every code x scale byte (subnormal codes and products, -0.0, NaN scales).
    Formats other than e2m1 ignore the flag. `plain`: the scale bytes
    FusedWeights.plain_scales allows (plain_bytes_only), that decode."""
    q = plain_bytes_only(every_code_and_scale(fmt)) if plain else every_code_and_scale(fmt)
    want = _bf16_operands(q)
    qd = hf.QuantizedTensor(q.codes.to(gpu_device), q.scales.to(gpu_device),
                            None if q.global_scale is None else q.global_scale.to(gpu_device), fmt)
    fw = _fused_weights(qd)
    assert fw.plain_scales is plain
    for config in (None, dict(BF16_DECODE=False), TRUNC):
        got = fused_gemm._dequantize(fw, torch.bfloat16, config).cpu()
        assert_bitwise_equal(got, want, f"{fmt} {config or 'tuned table'}")


def _bf16_gemm_outputs(x, ids, fw, a_gs, monkeypatch) -> dict:
    """The precision "bf16" GEMM on the "small" row (the decode rows'
    flags, FOLD_BIAS on CUDA) with BF16_DECODE on (True), off (False) and
    truncated ("trunc"); for NVFP4 on a device that takes S_CVT also as a
    device below sm_90 runs it ("sm_80": the fold's multipliers decoded by
    bits, not converted by the hardware)."""
    def run(flags):
        cfg = dict(lc.GPU_CONFIGS["small"].settings(), BLOCK_N=32, BLOCK_K=64, **flags, SPLIT_K=1)
        return fused_gemm.moe_gemm(x, ids, fw, precision="bf16", a_gscale=a_gs, mode="fused", config=cfg).cpu()

    outs = {flag: run(TRUNC if flag == "trunc" else dict(BF16_DECODE=flag)) for flag in (True, False, "trunc")}
    # the launch the tables pick for these rows (K of them an expert: BLOCK_M 64 and up, "large" or "large_n")
    outs["table"] = fused_gemm.moe_gemm(x, ids, fw, precision="bf16", a_gscale=a_gs, mode="fused").cpu()
    # and at BLOCK_M 32 ("medium" on "mma" words whose K is read to a multiple of 128, else the decode rows)
    outs["table_bm32"] = fused_gemm.moe_gemm(x, ids, fw, precision="bf16", a_gscale=a_gs, mode="fused",
                                             block_m=32).cpu()
    if lc.select_launch("gemm", lc.vendor_of(x.device), kind=1, fmt=fw.fmt, bf16=True, has_post=True, block_m=16,
                        n=fw.N, k=fw.K, cuda_cc=torch.cuda.get_device_capability(x.device)).S_CVT:
        with monkeypatch.context() as mp:
            mp.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
            outs["sm_80"] = run(dict(BF16_DECODE=True))
    return outs


@pytest.mark.gpu
@pytest.mark.parametrize("order,reps", GPU_GEMM_LAYOUTS)
@pytest.mark.parametrize("fmt,plain", FORMATS_PLAIN)
def test_bf16_gemm_picks_out_every_finite_weight_gpu(fmt, plain, order, reps, gpu_device, monkeypatch):
    """Precision "bf16" GEMM launch with one-hot rows, tables' BF16_DECODE on
    (bf16 multiplies, and ROCm's float32 multiplies truncated: BF16_TRUNC)
    and off, and the launch the tables pick (K rows an expert: the rows of
    BLOCK_M 64 and up, "large_n" for MXFP4 in scale order "n" on CUDA): the
    outputs agree bit for bit, and for MX formats (no post
    factor) each equals its weight's bf16 operand exactly. The "small" row's
    FOLD_BIAS folds e2m1's 2^126 into each multiplier on CUDA: for NVFP4
    every E4M3 s, its 2^-7 given back before the post factor. `plain`: the
    scale bytes FusedWeights.plain_scales allows, the multipliers built from
    the bytes' bits (the tables' decode launches on such weights)."""
    q = plain_bytes_only(every_code_and_scale(fmt, reps)) if plain else every_code_and_scale(fmt, reps)
    spec = q.spec
    finite = torch.isfinite(_bf16_operands(q).float())
    scales_ok = torch.isfinite(_bf16_operands(hf.QuantizedTensor(torch.full_like(q.codes, 2), q.scales,
                                                                 q.global_scale, fmt)).float())
    keep = finite & scales_ok
    scales = torch.where(scales_ok[..., ::spec.block_size], q.scales, 127 if spec.is_mx else 0x38).to(torch.uint8)
    q = hf.QuantizedTensor(torch.where(keep, q.codes, 0).to(torch.uint8), scales, q.global_scale, fmt)
    want = _bf16_operands(q).float()  # [E, N, K]
    E, N, K = want.shape
    x = torch.eye(K, device=gpu_device).repeat(E, 1)
    ids = torch.arange(E, device=gpu_device).repeat_interleave(K)
    qd = hf.QuantizedTensor(q.codes.to(gpu_device), q.scales.to(gpu_device),
                            None if q.global_scale is None else q.global_scale.to(gpu_device), fmt)
    fw = _fused_weights(qd, order)
    assert fw.plain_scales is plain
    a_gs = torch.tensor(1.0, device=gpu_device)
    outs = _bf16_gemm_outputs(x, ids, fw, a_gs, monkeypatch)
    assert_bitwise_equal(outs[True], outs[False], f"{fmt}: BF16_DECODE on vs off")
    assert_bitwise_equal(outs["trunc"], outs[False], f"{fmt}: BF16_TRUNC vs BF16_DECODE off")
    assert_bitwise_equal(outs["table"], outs[False], f"{fmt}: the tables' launch vs BF16_DECODE off")
    assert_bitwise_equal(outs["table_bm32"], outs[False], f"{fmt}: the tables' BLOCK_M 32 launch vs BF16_DECODE off")
    if "sm_80" in outs:
        assert_bitwise_equal(outs["sm_80"], outs[False], f"{fmt}: the fold without S_CVT vs BF16_DECODE off")
    if spec.is_mx:
        y = outs[True].reshape(E, K, N).transpose(1, 2)
        nonzero = want != 0  # zero weights: the sum of +-0 products is +0
        assert_bitwise_equal(y[nonzero], want[nonzero], f"{fmt}: one-hot rows vs the bf16 operands")
        assert bool((y[~nonzero] == 0).all()), f"{fmt}: zero weights gave nonzero outputs"


@pytest.mark.gpu
def test_nvfp4_nan_and_negative_scales_in_the_folded_gemm_gpu(gpu_device, monkeypatch):
    """Every E4M3 scale byte, the NaN bytes 0x7F / 0xFF and the negative
    ones included, through the NVFP4 "bf16" GEMM on dense activation rows:
    the folded launches (S_CVT's hardware conversion where the device takes
    it, and the fold decoded by bits) give BF16_DECODE off's outputs bit for
    bit, and NaN exactly in the rows whose weights hold a NaN (the reference
    dequantized: 0 x NaN is NaN too)."""
    q = every_code_and_scale("nvfp4")
    E, N, K = q.codes.shape
    gen = torch.Generator().manual_seed(5)
    # small integers: every product and partial sum of x and a code's value is exact in float32
    x = torch.randint(-3, 4, (E * 4, K), generator=gen).float().to(gpu_device)
    ids = torch.arange(E, device=gpu_device).repeat_interleave(4)
    qd = hf.QuantizedTensor(q.codes.to(gpu_device), q.scales.to(gpu_device), q.global_scale.to(gpu_device), "nvfp4")
    outs = _bf16_gemm_outputs(x, ids, _fused_weights(qd), torch.tensor(1.0, device=gpu_device), monkeypatch)
    for flag, got in outs.items():
        assert_bitwise_equal(got, outs[False], f"nvfp4 {flag} vs BF16_DECODE off")
    nan_rows = torch.isnan(hf.dequantize(q)).any(dim=-1)  # [E, N]
    got_nan = torch.isnan(outs[False]).reshape(E, 4, N).all(dim=1)
    assert bool(nan_rows.any()) and bool((got_nan == nan_rows).all())


@pytest.mark.parametrize("fmt", E2M1_FORMATS)
def test_mma_word_order_decodes_every_code_and_scale_byte(fmt):
    """e2m1 words in the "mma" order (CUDA's MX weights, fp4_words.ORDERS):
    the dequant pass under every decode flag, and the GEMM's one-hot rows
    both as x W^T and as the transposed product W x^T (SWAP_MN, the CUDA
    decode rows' choice on these words; here with float32 operands, which
    the interpreter runs), bit for bit the reference, every code x scale
    byte."""
    q = every_code_and_scale(fmt)

    def build(qq):
        fw = FusedWeights.from_quantized(qq, None if qq.global_scale is None else qq.global_scale.reshape(-1), "mma")
        assert fw.word_order == "mma"
        return fw

    fw = build(q)
    for flags in DECODE_FLAGS:
        assert_bitwise_equal(fused_gemm.fused_dequantize(fw, dict(flags)), hf.dequantize(q), f"{fmt} {flags}")
    _assert_one_hot_rows_pick_out_each_weight(_finite_only(q), build, extra=({}, dict(SWAP_MN=True)))


def test_the_mma_word_order_and_the_transposed_product_go_together():
    """CUDA stores MX e2m1 weights in the "mma" word order where K allows it
    (NVFP4, ROCm and the interpreter keep "k"); the CUDA rows' SWAP_MN
    acts only on GEMM launches over those words with bf16 operands (float32
    ones where an override asks), never in the dequant pass."""
    assert lc.word_order("cuda", "mxfp4", 2048) == "mma"
    assert lc.word_order("cuda", "mxfp4", 2048 + 16) == "k"
    for vendor, fmt in (("cuda", "nvfp4"), ("cuda", "mxfp8_e4m3"), ("rocm", "mxfp4"), ("interpreter", "mxfp4")):
        assert lc.word_order(vendor, fmt, 2048) == "k", (vendor, fmt)
    assert lc.word_order("cuda", None, 2048) == "k"
    kw = dict(kind=1, fmt="mxfp4", block_m=16, n=2048, k=2048, bf16=True)
    c = lc.select_launch("gemm", "cuda", word_order="mma", **kw)
    assert (c.row, c.SWAP_MN, c.MMA_ORDER) == ("small", True, True) and c.meta()["SWAP_MN"] is True
    assert lc.select_launch("gemm", "cuda", word_order="mma", **dict(kw, k=768)).SWAP_MN is True  # small_short_k
    assert lc.select_launch("gemm", "cuda", word_order="mma", **dict(kw, block_m=128)).SWAP_MN is True  # large
    unswapped = [lc.select_launch("gemm", "cuda", word_order="k", **kw),
                 lc.select_launch("gemm", "cuda", word_order="k", **dict(kw, block_m=128)),
                 lc.select_launch("gemm", "cuda", word_order="mma", **dict(kw, bf16=False)),
                 lc.select_launch("dequant", "cuda", word_order="mma", **{k: v for k, v in kw.items() if k != "block_m"}),
                 lc.select_launch("gemm", "rocm", word_order="k", **kw)]
    for cfg in unswapped:
        assert "SWAP_MN" not in cfg.meta(), cfg
    assert unswapped[3].MMA_ORDER is True and unswapped[0].MMA_ORDER is False
    assert lc.select_launch("gemm", "interpreter", word_order="mma", override=dict(SWAP_MN=True),
                            **dict(kw, bf16=False)).SWAP_MN is True
    with pytest.raises(ValueError, match="word order 'mma' needs K divisible by 32"):
        lc.select_launch("gemm", "cuda", word_order="mma", **dict(kw, k=2048 + 16))
    assert all(row.SWAP_MN is None for row in lc.ROCM_BF16_CODE_CONFIGS.values())
    with pytest.raises(ValueError, match="select_launch: unknown word order 'MMA'"):
        lc.select_launch("gemm", "cuda", word_order="MMA", **dict(kw, kind=0, fmt=None, w_bytes=2))


def test_n_order_scale_bytes_take_their_own_large_row():
    """At BLOCK_M 64 and up, a bf16 GEMM on "mma" words takes the transposed
    product: on "large", or on "large_n" (its own tile) where its scale bytes
    are in order "n" (gpt-oss-120b's: launch_config.scale_order). NVFP4's
    "k" words, float32 operands and ROCm keep "large" untransposed, the GEMM
    on predequant's scratch and BLOCK_M below 64 their rows, and a scale
    order that is not one is refused."""
    kw = dict(kind=1, fmt="mxfp4", block_m=128, n=5760, k=2880, bf16=True, word_order="mma")
    for order, name in (("n", "large_n"), ("k", "large")):
        row = lc.GPU_CONFIGS[name]
        for bm in (64, 128):
            c = lc.select_launch("gemm", "cuda", scale_order=order, **dict(kw, block_m=bm))
            assert (c.row, c.SWAP_MN, c.BLOCK_N, c.BLOCK_K, c.num_warps, c.num_stages) == (
                name, True, row.BLOCK_N, row.BLOCK_K, row.num_warps, row.num_stages), c
    assert lc.select_launch("gemm", "cuda", **kw).row == "large"  # the default order: "k"
    assert lc.select_launch("gemm", "cuda", scale_order="n", **dict(kw, block_m=32)).row == "small"
    kept = [lc.select_launch("gemm", "cuda", scale_order="n", **dict(kw, fmt="nvfp4", word_order="k",
                                                                    has_post=True)),
            lc.select_launch("gemm", "cuda", scale_order="n", **dict(kw, bf16=False)),
            lc.select_launch("gemm", "rocm", scale_order="n", **dict(kw, word_order="k"))]
    for c in kept:
        assert c.row == "large" and "SWAP_MN" not in c.meta(), c
    scratch = lc.select_launch("scratch_gemm", "cuda", scale_order="n", **dict(kw, kind=0, fmt=None, w_bytes=2))
    assert scratch.row == "large_float"
    assert "large_n" not in lc.ROCM_BF16_CODE_CONFIGS
    with pytest.raises(ValueError, match="unknown scale order 'N'"):
        lc.select_launch("gemm", "cuda", scale_order="N", **kw)


def test_long_k_loops_take_their_own_large_row():
    """At BLOCK_M 64 and up, the transposed product (bf16, "mma" words) over a
    K loop of at least LONG_K_MIN, read to a multiple of its BLOCK_K, in
    either scale order, takes "large_long_k"; a shorter or ragged K (order
    "n": "large_n"), BLOCK_M below 64, float32 operands, NVFP4's "k" words
    and ROCm do not, and ROCm's tables hold no such row."""
    kw = dict(kind=1, fmt="mxfp4", block_m=128, n=1536, bf16=True, word_order="mma")
    row = lc.GPU_CONFIGS["large_long_k"]
    for k in (lc.LONG_K_MIN, 2 * lc.LONG_K_MIN, 14336):
        for bm in (64, 128):
            c = lc.select_launch("gemm", "cuda", k=k, **dict(kw, block_m=bm))
            assert (c.row, c.SWAP_MN, c.BLOCK_N, c.BLOCK_K, c.num_warps, c.num_stages) == (
                "large_long_k", True, row.BLOCK_N, row.BLOCK_K, row.num_warps, row.num_stages), (k, bm, c)
    assert lc.select_launch("gemm", "cuda", k=lc.LONG_K_MIN - row.BLOCK_K, **kw).row == "large"
    assert lc.select_launch("gemm", "cuda", k=lc.LONG_K_MIN + 64, **kw).row == "large"  # not a multiple of 128
    assert lc.select_launch("gemm", "cuda", k=lc.LONG_K_MIN + 64, scale_order="n", **kw).row == "large_n"
    for order in ("k", "n"):  # read to a multiple of 128: the long-K row, x masked on K
        c = lc.select_launch("gemm", "cuda", k=2880, k_read=3072, scale_order=order, **kw)
        assert (c.row, c.EVEN_NK, c.K_TAIL, c.K_OVERREAD) == ("large_long_k", False, False, True), c
        assert lc.select_launch("gemm", "cuda", k=lc.LONG_K_MIN, scale_order=order, **kw).row == "large_long_k"
    assert lc.select_launch("gemm", "cuda", k=lc.LONG_K_MIN, **dict(kw, block_m=16)).row == "small"
    for c in (lc.select_launch("gemm", "cuda", k=lc.LONG_K_MIN, **dict(kw, bf16=False)),
              lc.select_launch("gemm", "cuda", k=lc.LONG_K_MIN, **dict(kw, fmt="nvfp4", word_order="k", has_post=True)),
              lc.select_launch("gemm", "rocm", k=lc.LONG_K_MIN, **dict(kw, word_order="k"))):
        assert c.row == "large", c
    assert "large_long_k" not in lc.ROCM_BF16_CODE_CONFIGS


def test_block_m_32_takes_medium_on_mma_words():
    """At BLOCK_M 32 the transposed product (bf16, "mma" words) over a K
    read to a multiple of "medium"'s BLOCK_K takes "medium", short K loops
    included, gpt-oss' K 2880 read to 3072 with K_OVERREAD; a ragged K read
    to itself, BLOCK_M 16, float32 operands, NVFP4's "k" words and ROCm keep
    the decode rows, and ROCm's tables hold no such row."""
    kw = dict(kind=1, fmt="mxfp4", block_m=32, n=1536, bf16=True, word_order="mma")
    row = lc.GPU_CONFIGS["medium"]
    for k, read in ((768, 768), (2048, 2048), (14336, 14336), (2880, 3072)):
        c = lc.select_launch("gemm", "cuda", k=k, k_read=read, **kw)
        assert (c.row, c.SWAP_MN, c.BLOCK_N, c.BLOCK_K, c.num_warps, c.num_stages, c.K_TAIL) == (
            "medium", True, row.BLOCK_N, row.BLOCK_K, row.num_warps, row.num_stages, False), (k, c)
        assert c.K_OVERREAD is (True if read > k else None)
    assert lc.select_launch("gemm", "cuda", k=2880, **kw).row == "small"  # not read past K: K_TAIL
    assert lc.select_launch("gemm", "cuda", k=1056, **kw).row == "small"
    assert lc.select_launch("gemm", "cuda", k=768, **dict(kw, block_m=16)).row == "small_short_k"
    for c in (lc.select_launch("gemm", "cuda", k=2048, **dict(kw, bf16=False)),
              lc.select_launch("gemm", "cuda", k=2048, **dict(kw, fmt="nvfp4", word_order="k", has_post=True)),
              lc.select_launch("gemm", "rocm", k=2048, **dict(kw, word_order="k"))):
        assert c.row == "small", c
    assert "medium" not in lc.ROCM_BF16_CODE_CONFIGS


def test_read_k_covers_ragged_long_k_loops_of_mma_words():
    """launch_config.read_k: e2m1 words in the "mma" order with K >=
    LONG_K_MIN are read to the next multiple of the decode row's BLOCK_K,
    which the long-K and "medium" rows' divides (gpt-oss-120b: 2880 ->
    3072); "k" words, short K and K already a multiple keep K."""
    step = lc.GPU_CONFIGS["small"].BLOCK_K
    assert step % lc.GPU_CONFIGS["large_long_k"].BLOCK_K == 0 == step % lc.GPU_CONFIGS["medium"].BLOCK_K
    assert lc.read_k("mma", 2880) == 3072 == 12 * step
    assert lc.read_k("mma", lc.LONG_K_MIN + 32) == lc.LONG_K_MIN + step
    for order, k in (("mma", lc.LONG_K_MIN), ("mma", lc.LONG_K_MIN - 32), ("mma", 14336), ("k", 2880), ("mma", 0)):
        assert lc.read_k(order, k) == k, (order, k)


def test_k_overread_launches_mask_x_only():
    """select_launch takes K_OVERREAD where the weights are readable past a
    K with a tail to a multiple of the row's BLOCK_K and N has no tail: one
    loop, x's loads masked on K (the "small" row's 256 too, where K 2208 is
    read to 2304), never on the dequant pass, nor where N has a tail, an
    override asks for masks or K_TAIL, or BLOCK_K does not divide the read
    K (K_TAIL then); an override asking for it there, or a read K shorter
    than K, is refused."""
    kw = dict(kind=1, fmt="mxfp4", n=5760, bf16=True, word_order="mma")

    def flags(**more):
        c = lc.select_launch("gemm", "cuda", **dict(kw, **more))
        return c.BLOCK_K, c.EVEN_NK, c.K_TAIL, c.K_OVERREAD
    small = lc.GPU_CONFIGS["small"].BLOCK_K
    assert flags(block_m=16, k=2208, k_read=2304) == (small, False, False, True)
    assert flags(block_m=16, k=2880, k_read=3072) == (small, False, False, True)  # gpt-oss' decode
    assert flags(block_m=16, k=2880, k_read=2944) == (small, False, True, None)  # 2944 = 11.5 x 256
    assert flags(block_m=16, k=2880, k_read=2944, override={"BLOCK_K": 128}) == (128, False, False, True)
    assert flags(block_m=16, k=2880, k_read=2944, n=5760 + 8)[1:] == (False, False, None)
    assert flags(block_m=16, k=2208, k_read=2304, override={"EVEN_NK": False})[1:] == (False, False, None)
    assert flags(block_m=16, k=2208, k_read=2304, override={"K_TAIL": True})[1:] == (False, True, None)
    assert flags(block_m=128, k=2880, k_read=2944, bf16=False) == (64, True, False, None)  # 2880 = 45 x 64
    d = lc.select_launch("dequant", "cuda", **dict(kw, k=2880, k_read=2944))
    assert d.K_OVERREAD is None and "K_OVERREAD" not in d.meta()
    assert lc.select_launch("gemm", "cuda", block_m=128, **dict(kw, k=2880, k_read=2944)).meta()["K_OVERREAD"]
    with pytest.raises(ValueError, match="K_OVERREAD needs a GEMM launch with a K tail"):
        lc.select_launch("gemm", "cuda", block_m=16, override={"K_OVERREAD": True}, **dict(kw, k=2880, k_read=2944))
    with pytest.raises(ValueError, match="K_OVERREAD needs a GEMM launch with a K tail"):
        lc.select_launch("gemm", "cuda", block_m=16, override={"K_OVERREAD": True}, **dict(kw, k=4096))
    with pytest.raises(ValueError, match="readable to K 2048, fewer than the GEMM's K 2880"):
        lc.select_launch("gemm", "cuda", block_m=16, **dict(kw, k=2880, k_read=2048))


def _overread_weights(seed: int, E=2, N=32, K=2080):
    """Random MXFP4 weights [E, N, K] (K >= LONG_K_MIN, not a multiple of 128) as FusedWeights in the "mma"
    word order, read to read_k's K, beside the same in "k" words (read to K)."""
    g = torch.Generator().manual_seed(seed)
    q = hf.quantize(torch.randn(E, N, K, generator=g) * K ** -0.5, "mxfp4")
    return q, FusedWeights.from_quantized(q, None, word_order="mma"), FusedWeights.from_quantized(q, None)


def _held(t: torch.Tensor) -> int:
    """Elements of t's storage."""
    return t.untyped_storage().nbytes() // t.element_size()


def test_overread_weights_hold_the_checkpoints_bytes_and_slack():
    """FusedWeights of "mma" words past a ragged long K under plain scales:
    the views are [E, N, K / 2] and [E, N, K / 32] as ever, dense (each
    row's K followed by the next row's), and each storage holds zero slack
    after them, as far as a read of the last row to read_k's K reaches
    (k_over, slack, nbytes): the checkpoint's bytes and 112 + 7 x 32 more.
    Built a few experts at a time (from_quantized_by_experts) they hold the
    same bytes and slack; copied, or with a scale byte that is not plain,
    the read past K is not claimed; a claim the storage, the strides or
    the scales do not bear is refused before a launch (check_over_read)."""
    q, fw, ref = _overread_weights(1)
    E, N, K = q.codes.shape
    assert (fw.k_over, fw.k_read, ref.k_over) == (lc.read_k("mma", K) - K, lc.read_k("mma", K), 0)
    assert fw.k_over == 224 and fw.data.shape == (E, N, K // 2) and fw.scales.shape == (E, N, K // 32)
    assert fw.plain_scales and fw.scale_order == "n"  # rows of 65 bytes: each block's N bytes contiguous
    assert fw.data.is_contiguous() and fw.data.storage_offset() == 0 == fw.scales.storage_offset()
    assert (fw.slack("data"), fw.slack("scales")) == (112, 7 * N)
    assert _held(fw.data) == fw.data.numel() + 112 and _held(fw.scales) == fw.scales.numel() + 7 * N
    flat = torch.empty(0, dtype=torch.uint8).set_(fw.data.untyped_storage())
    assert not bool(flat[fw.data.numel():].any())
    flat = torch.empty(0, dtype=torch.uint8).set_(fw.scales.untyped_storage())
    assert not bool(flat[fw.scales.numel():].any())
    assert fw.nbytes() == E * N * (K // 2 + K // 32) + 112 + 7 * N == ref.nbytes() + 112 + 7 * N
    assert_bitwise_equal(fused_gemm.fused_dequantize(fw), fused_gemm.fused_dequantize(ref), "mma vs k words")
    fw.check_over_read()
    by = FusedWeights.from_quantized_by_experts(q, None, torch.device("cpu"), chunk_bytes=N * K, word_order="mma")
    assert (by.k_over, by.k_slack, by.plain_scales, by.nbytes()) == (fw.k_over, fw.k_slack, True, fw.nbytes())
    for name in ("data", "scales"):
        a, b = getattr(by, name), getattr(fw, name)
        assert a.stride() == b.stride() and torch.equal(a, b) and _held(a) == _held(b), name
    by.check_over_read()
    import dataclasses
    assert (dataclasses.replace(fw).k_over, fw.k_slack) == (0, 224)
    odd = hf.QuantizedTensor(q.codes, q.scales.clone(), None, "mxfp4")
    odd.scales[-1, -1, -1] = 255  # a NaN multiplier in the last block: not plain, so never read past
    for w in (FusedWeights.from_quantized(odd, None, word_order="mma"),
              FusedWeights.from_quantized_by_experts(odd, None, torch.device("cpu"), chunk_bytes=N * K,
                                                     word_order="mma")):
        assert (w.plain_scales, w.k_over, w.k_slack, w.nbytes()) == (False, 0, 224, fw.nbytes())
        assert _held(w.data) == w.data.numel() + 112  # the slack is held all the same
        w.k_over = 224
        with pytest.raises(ValueError, match=r"k_over 224 without plain scales: the weights read past K may be NaN"):
            w.check_over_read()
    bare = FusedWeights(1, fw.data.clone(), fw.scales.clone(), None, "mxfp4", E, N, K, "mma")
    bare.plain_scales, bare.k_over = True, 224
    with pytest.raises(ValueError, match=rf"data read to K 2304 \(k_over 224\) reaches element {E * N * K // 2 + 112} "
                                         rf"of a storage of {E * N * K // 2}: no slack after it"):
        bare.check_over_read()
    with pytest.raises(ValueError, match="no slack after it"):
        fused_gemm.moe_gemm(torch.zeros(1, K), torch.zeros(1, dtype=torch.int64), bare, mode="fused")
    # experts 64 bytes apart, with room to spare: past the last row of an expert lie bytes no scale check covered
    apart = torch.zeros(E * (N * K // 2 + 64) + 4096, dtype=torch.uint8)
    apart = apart.as_strided((E, N, K // 2), (N * K // 2 + 64, K // 2, 1)).copy_(fw.data)
    gaps = FusedWeights(1, apart, fw.scales, None, "mxfp4", E, N, K, "mma")
    gaps.plain_scales, gaps.k_over = True, 224
    with pytest.raises(ValueError, match=rf"data of strides \[{N * K // 2 + 64}, {K // 2}, 1\] read past K "
                                         r"\(k_over 224\): it must be dense"):
        gaps.check_over_read()


def test_k_overread_gemm_is_the_masked_gemm():
    """On the interpreter, a GEMM launch with K_OVERREAD (the weights' loads
    unmasked, reading past each row's K the next row's codes and scale
    bytes, past the last expert's last row the slack; x's masked) gives
    the every-BLOCK_K-masked launch's outputs bit for bit, and those of the
    same weights in "k" words. Every expert has rows, the last one too,
    and the weights past each row's K are not zeros. x's rows hold Inf and
    NaN in their first column: a launch reading x past K (the next row)
    would put 0 x Inf = NaN into the row before."""
    q, fw, ref = _overread_weights(2)
    E, N, K = q.codes.shape
    assert bool(fw.data[:, 1:, :48].any())  # what rows 0 .. N - 2 read past K: their next row's first codes
    g = torch.Generator().manual_seed(3)
    P = 7
    ids = torch.tensor([1, 0, 1, 1, 0, 1, 0])
    x = torch.randn(P, K, generator=g).to(torch.bfloat16).float()
    x[1:, 0] = torch.tensor([float("inf"), float("nan"), float("-inf"), 1.0, float("inf"), 2.0])
    tile = dict(BLOCK_N=16, BLOCK_K=64, SPLIT_K=1)  # 2080 = 32.5 x 64; read to 2304 = 36 x 64
    cfg = lc.select_launch("gemm", "interpreter", kind=1, fmt="mxfp4", block_m=16, n=N, k=K, k_read=fw.k_read,
                           word_order="mma", override=tile)
    assert (cfg.K_OVERREAD, cfg.K_TAIL, cfg.EVEN_NK) == (True, False, False)
    over = fused_gemm.moe_gemm(x, ids, fw, mode="fused", config=tile)
    masked = fused_gemm.moe_gemm(x, ids, fw, mode="fused", config=dict(tile, EVEN_NK=False))
    k_words = fused_gemm.moe_gemm(x, ids, ref, mode="fused", config=dict(tile, EVEN_NK=False))
    assert_bitwise_equal(over, masked, "K_OVERREAD vs every BLOCK_K masked")
    assert_bitwise_equal(over, k_words, "K_OVERREAD vs the same weights in k words")
    assert bool(torch.isfinite(over[0]).all())


def test_the_transposed_product_at_large_block_m_masks_every_block_k():
    """The transposed product at BLOCK_M 64 and up gave wrong sums with
    K_TAIL on an H200 (docs/benchmarks.md): a K with a tail of its BLOCK_K
    masks every BLOCK_K there, and an override asking for K_TAIL is refused;
    the untransposed launches and BLOCK_M below 64 keep K_TAIL."""
    kw = dict(kind=1, fmt="mxfp4", n=5760, k=1056, bf16=True, word_order="mma")  # 1056 = 16 x 64 + 32
    for order in ("k", "n"):
        c = lc.select_launch("gemm", "cuda", block_m=128, scale_order=order, **kw)
        assert (c.SWAP_MN, c.EVEN_NK, c.K_TAIL) == (True, False, False), c
        with pytest.raises(ValueError, match="K_TAIL with SWAP_MN at BLOCK_M 128"):
            lc.select_launch("gemm", "cuda", block_m=128, scale_order=order, override=dict(K_TAIL=True), **kw)
    assert lc.select_launch("gemm", "cuda", block_m=128, **dict(kw, word_order="k")).K_TAIL is True
    assert lc.select_launch("gemm", "cuda", block_m=16, **dict(kw, k=2880)).K_TAIL is True  # 2880 = 11 x 256 + 64


@pytest.mark.gpu
@pytest.mark.parametrize("order", SCALE_ORDERS)
def test_large_block_m_sums_over_a_k_with_a_tail_gpu(order, gpu_device):
    """gpt-oss-120b's GEMM2 at prefill (128 experts, N = K = 2880: a tail of
    BLOCK_K 128; 4096 tokens, top-4: BLOCK_M 128), seeded random MXFP4
    weights in each scale order: the tables' launch (on CUDA the weights
    are read to K 3072: "large_long_k" with K_OVERREAD), and the one with
    BLOCK_N 64 and BLOCK_K 128 (whose transposed product summed wrong with
    K_TAIL on an H200, by up to 6% of the largest output), K_OVERREAD and
    every BLOCK_K masked, each within contract (2) of
    precision "ieee"'s sums, per element: both sum exact products of bf16
    numbers in float32, so |bf16 - ieee| <= 2 gamma_K (|x| @ |W[e]|^T)."""
    from harness.kernels.pair_layout import pair_layout

    E, N, K, T, top_k = 128, 2880, 2880, 4096, 4
    g = torch.Generator(device=gpu_device).manual_seed(11)
    w = torch.randn(E, N, K, generator=g, device=gpu_device) * K ** -0.5
    q = hf.quantize(w, "mxfp4")
    del w
    fw = _fused_weights(q, order)
    ids = torch.topk(torch.randn(T, E, generator=g, device=gpu_device), top_k, dim=1).indices.reshape(-1)
    x = torch.randn(T * top_k, K, generator=g, device=gpu_device).to(torch.bfloat16)
    ieee = fused_gemm.moe_gemm(x.float(), ids, fw, precision="ieee", mode="fused").double()
    mag = torch.zeros_like(ieee)
    ax = x.abs().double()
    for e in range(E):  # |x| @ |W[e]|^T over the rows of each expert (float64, one expert's weights at a time)
        rows = (ids == e).nonzero().reshape(-1)
        we = hf.dequantize(hf.QuantizedTensor(q.codes[e], q.scales[e], None, "mxfp4")).abs().double()
        mag[rows] = ax[rows] @ we.T
    bound = 2 * (K * hf.spec.U32 / (1 - K * hf.spec.U32)) * mag
    bm128 = pair_layout(ids, E, block_m=128)
    k128 = dict(lc.GPU_CONFIGS["large"].settings(), BLOCK_N=64, BLOCK_K=128, num_stages=3, SPLIT_K=1)
    for what, kw in (("the tables' launch", {}), ("BLOCK_K 128", dict(config=k128, layout=bm128)),
                     ("BLOCK_K 128 masked", dict(config=dict(k128, EVEN_NK=False), layout=bm128))):
        got = fused_gemm.moe_gemm(x, ids, fw, precision="bf16", mode="fused", **kw).double()
        over = (got - ieee).abs() > bound
        assert not bool(over.any()), (f"{what}, scale order {order}: {int(over.sum())} sums outside contract (2), "
                                      f"worst {float(((got - ieee).abs() - bound).max()):.3g}")


def test_an_empty_k_sums_to_zero():
    """K = 0: every output is the empty sum, +0, then the bias and the
    router weight as the torch ops give them; the dequant pass writes
    nothing. The kernel assumes at least one K step (tl.assume: the
    interpreter checks it), so neither is launched."""
    E, N, P = 2, 8, 5
    fw = FusedWeights.from_float(torch.zeros(E, N, 0))
    ids = torch.tensor([0, 1, 1, 0, 1])
    bias = torch.randn(E, N, generator=torch.Generator().manual_seed(3))
    rs = torch.rand(P, generator=torch.Generator().manual_seed(4))
    out = fused_gemm.moe_gemm(torch.zeros(P, 0), ids, fw, precision="ieee", mode="fused")
    assert_bitwise_equal(out, torch.zeros(P, N), "K = 0")
    got = fused_gemm.moe_gemm(torch.zeros(P, 0), ids, fw, precision="ieee", mode="fused", bias=bias, row_scale=rs)
    assert_bitwise_equal(got, (torch.zeros(P, N) + bias.index_select(0, ids)) * rs[:, None], "K = 0, bias, weights")
    assert fused_gemm.fused_dequantize(fw).shape == (E, N, 0)


def test_the_launcher_passes_the_weights_scale_order(monkeypatch):
    """moe_gemm selects its launch with the scale order its weights hold
    (FusedWeights.scale_order), which picks the row at BLOCK_M 64 and up."""
    seen = []
    real = fused_gemm.select_launch

    def spy(*args, **kw):
        seen.append(kw.get("scale_order"))
        return real(*args, **kw)

    monkeypatch.setattr(fused_gemm, "select_launch", spy)
    q = every_code_and_scale("mxfp4")  # rows of 2 blocks: either order can be stored
    x = torch.eye(q.codes.shape[-1])
    ids = torch.zeros(x.shape[0], dtype=torch.int64)
    for order in SCALE_ORDERS:
        seen.clear()
        fused_gemm.moe_gemm(x, ids, _fused_weights(_finite_only(q), order), precision="ieee", mode="fused")
        assert seen == [order], (order, seen)


def test_the_launcher_passes_the_read_k(monkeypatch):
    """moe_gemm selects its launch with the K its weights may be read to
    (FusedWeights.k_read), through the custom op and with a launch
    override alike; the GEMM on predequant's scratch, which holds K
    columns, with K."""
    seen = []
    real = fused_gemm.select_launch

    def spy(launch, *args, **kw):
        seen.append((launch, kw.get("k"), kw.get("k_read")))
        return real(launch, *args, **kw)

    monkeypatch.setattr(fused_gemm, "select_launch", spy)
    q, fw, _ = _overread_weights(4, E=1, N=16)
    K = fw.K
    x = torch.randn(3, K, generator=torch.Generator().manual_seed(5))
    ids = torch.zeros(3, dtype=torch.int64)
    fused_gemm.moe_gemm(x, ids, fw, mode="fused")
    fused_gemm.moe_gemm(x, ids, fw, mode="fused", config=dict(BLOCK_K=64))
    assert seen == [("gemm", K, fw.k_read)] * 2, seen
    seen.clear()
    fused_gemm.moe_gemm(x, ids, fw, mode="predequant")
    assert seen == [("dequant", K, None), ("scratch_gemm", K, K)], seen


# ---- FusedWeights.plain_scales: E8M0 multipliers as the float whose
# exponent field is the byte, where no byte needs the cases of 0 and 255.


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_plain_scales_decode_every_code_and_scale_byte(fmt):
    """On weights whose bytes allow it (plain_bytes_only), from_quantized
    sets plain_scales and the launches take PLAIN_SCALES: the dequant pass
    under every decode flag and the GEMM's one-hot rows are bit for bit the
    reference, every code x every byte in [1, 128], byte 0 over +-0."""
    q = plain_bytes_only(every_code_and_scale(fmt))

    def build(qq):
        fw = _fused_weights(qq)
        assert fw.plain_scales, fmt
        return fw

    fw = build(q)
    cfg = lc.select_launch("dequant", "interpreter", kind=1, fmt=fmt, n=fw.N, k=fw.K, word_order=fw.word_order,
                           plain_scales=fw.plain_scales)
    assert cfg.meta()["PLAIN_SCALES"] is True
    for flags in DECODE_FLAGS:
        assert_bitwise_equal(fused_gemm.fused_dequantize(fw, dict(flags)), hf.dequantize(q), f"{fmt} {flags}")
    _assert_one_hot_rows_pick_out_each_weight(_finite_only(q), build)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_plain_scales_are_wrong_where_the_rule_refuses_them(fmt):
    """Why the rule exists: every code x every scale byte with plain_scales
    forced on. Bytes 1..254 still decode bit for bit (float32 multipliers,
    nothing folded); a finite nonzero code
    under byte 0 loses its 2^-127 (becomes +-0) and one under byte 255 its
    NaN (becomes +-Inf), so from_quantized must leave the flag off there."""
    q = every_code_and_scale(fmt)
    fw = _fused_weights(q)
    assert not fw.plain_scales
    fw.plain_scales = True  # what a rule that skipped the check would do
    got, want = fused_gemm.fused_dequantize(fw), hf.dequantize(q)
    byte = q.scales.repeat_interleave(q.spec.block_size, -1)
    value = hf.dequantize(hf.QuantizedTensor(q.codes, torch.full_like(q.scales, 127), None, fmt))  # scale 1
    live = torch.isfinite(value) & (value != 0)
    normal = (byte > 0) & (byte < 255)
    assert_bitwise_equal(got[normal], want[normal], f"{fmt}: bytes 1..254")
    assert bool((got[live & (byte == 0)] == 0).all()) and bool((want[live & (byte == 0)] != 0).all())
    assert bool(torch.isinf(got[live & (byte == 255)]).all()) and bool(torch.isnan(want[live & (byte == 255)]).all())


def test_plain_scales_rule():
    """plain_scales is derived at conversion, never passed in: True for MX
    weights with no byte above 128 and byte 0 only over zero codes; False
    for two-level rows, a byte above 128 (129 or NaN), a nonzero code under
    byte 0, tensors on the meta device and a FusedWeights built by hand; a
    chunked build holds it only if every chunk does. The selector sets
    PLAIN_SCALES on MX code launches only, and no override can set it."""
    g = torch.Generator().manual_seed(0)
    E, N, K = 4, 8, 64
    codes = torch.randint(0, 16, (E, N, K), generator=g, dtype=torch.uint8)
    scales = torch.randint(1, 129, (E, N, K // 32), generator=g, dtype=torch.uint8)

    def plain(c, s, fmt="mxfp4"):
        return FusedWeights.from_quantized(hf.QuantizedTensor(c, s, None, fmt), None).plain_scales

    assert plain(codes, scales)
    z_codes, z_scales = codes.clone(), scales.clone()
    z_scales[1, 2, 1] = 0
    z_codes[1, 2, 32:64] = torch.tensor([0, 8], dtype=torch.uint8).repeat(16)  # +0 and -0
    assert plain(z_codes, z_scales)
    z_codes[1, 2, 40] = 1  # 0.5 x 2^-127
    assert not plain(z_codes, z_scales)
    nan = scales.clone()
    nan[3, 7, 0] = 255
    zeros = codes.clone()
    zeros[3, 7, :32] = 0
    assert not plain(zeros, nan)  # NaN scale even over zero codes
    big = scales.clone()
    big[0, 0, 0] = 129  # 2^2: the folded exponent field 129 + 126 = 255 is Inf/NaN's
    assert not plain(codes, big)
    e4m3_scales = torch.randint(1, 0x7F, (E, N, K // 16), generator=g, dtype=torch.uint8)
    assert not plain_scale_bytes(codes, e4m3_scales, hf.FORMATS["nvfp4"])  # a minifloat scale: the full decode
    q_nan = hf.QuantizedTensor(zeros, nan, None, "mxfp4")
    assert not FusedWeights.from_quantized_by_experts(q_nan, None, "cpu", chunk_bytes=N * K).plain_scales
    assert FusedWeights.from_quantized_by_experts(hf.QuantizedTensor(codes, scales, None, "mxfp4"), None, "cpu",
                                                  chunk_bytes=N * K).plain_scales
    assert not plain_scale_bytes(codes.to("meta"), scales.to("meta"), hf.FORMATS["mxfp4"])  # no values to check
    built = FusedWeights.from_quantized(hf.QuantizedTensor(codes, scales, None, "mxfp4"), None)
    by_hand = FusedWeights(1, built.data, built.scales, None, "mxfp4", E, N, K, built.word_order)
    assert not by_hand.plain_scales
    with pytest.raises(TypeError):
        FusedWeights(1, built.data, built.scales, None, "mxfp4", E, N, K, built.word_order, True)
    kw = dict(block_m=16, n=64, k=256, plain_scales=True)
    assert lc.select_launch("gemm", "cuda", kind=1, fmt="mxfp8_e4m3", bf16=True, **kw).PLAIN_SCALES is True
    assert "PLAIN_SCALES" not in lc.select_launch("gemm", "cuda", kind=1, fmt="nvfp4", bf16=True, **kw).meta()
    assert "PLAIN_SCALES" not in lc.select_launch("gemm", "cuda", kind=0, bf16=True, w_bytes=2, **kw).meta()
    assert "PLAIN_SCALES" not in lc.select_launch("gemm", "cuda", kind=1, fmt="mxfp4", bf16=True, block_m=16, n=64,
                                                  k=256).meta()
    with pytest.raises(ValueError, match="PLAIN_SCALES"):
        lc.select_launch("gemm", "cuda", kind=1, fmt="mxfp4", bf16=True, block_m=16, n=64, k=256,
                         override=dict(PLAIN_SCALES=True))


def test_the_folded_multiply_only_on_e2m1_in_bf16_on_cuda():
    """FOLD_BIAS (the decode rows): e2m1's 2^126 folded into each block
    multiplier, one packed multiply a pair in inline PTX. Kept only on CUDA
    (PTX), for e2m1 codes with BF16_DECODE's bf16 multiplies, where the
    folded multiplier stays a finite bf16: MX weights whose scale bytes are
    plain (the folded exponent field stays normal), and NVFP4 GEMMs with the
    post factor (which gives 2^S_FOLD_EXP back); dropped on ROCm (BF16_TRUNC
    rows), the interpreter, float32 operands, other MX formats, NVFP4 without
    the post factor or in the dequant pass, and on MX weights whose bytes
    were not checked, even where an override asks for it."""
    assert lc.GPU_CONFIGS["small"].FOLD_BIAS and lc.GPU_CONFIGS["small_short_k"].FOLD_BIAS
    assert not lc.GPU_CONFIGS["large"].FOLD_BIAS
    kw = dict(kind=1, block_m=16, n=64, k=2048)
    assert lc.select_launch("gemm", "cuda", fmt="mxfp4", bf16=True, plain_scales=True, **kw).FOLD_BIAS is True
    assert lc.select_launch("gemm", "cuda", fmt="mxfp4", bf16=True, plain_scales=True, k=768, kind=1, block_m=16,
                            n=64).FOLD_BIAS is True  # the short-K row
    nv = lc.select_launch("gemm", "cuda", fmt="nvfp4", bf16=True, has_post=True, **kw)
    assert (nv.FOLD_BIAS, nv.RAW_S, nv.HAS_POST, nv.meta()["S_FOLD_EXP"]) == (True, True, True, 7)
    # the hardware's E4M3 conversion: sm_90 and later (the default: the lowest CUDA target), never below
    assert nv.meta()["S_CVT"] is True
    assert lc.select_launch("gemm", "cuda", fmt="nvfp4", bf16=True, has_post=True, cuda_cc=(10, 0), **kw).S_CVT
    for cc in ((8, 0), (8, 9)):
        older = lc.select_launch("gemm", "cuda", fmt="nvfp4", bf16=True, has_post=True, cuda_cc=cc, **kw)
        assert older.meta()["S_FOLD_EXP"] == 7 and "S_CVT" not in older.meta(), cc
    assert "S_CVT" not in lc.select_launch("gemm", "cuda", fmt="mxfp4", bf16=True, plain_scales=True, **kw).meta()
    dropped = [dict(vendor="cuda", fmt="mxfp4", bf16=True, plain_scales=False),
               dict(vendor="rocm", fmt="mxfp4", bf16=True, plain_scales=True),
               dict(vendor="cuda", fmt="mxfp4", bf16=False, plain_scales=True),
               dict(vendor="rocm", fmt="nvfp4", bf16=True, has_post=True),
               dict(vendor="cuda", fmt="nvfp4", bf16=True, has_post=False),
               dict(vendor="cuda", fmt="nvfp4", bf16=False, has_post=True),
               dict(vendor="cuda", fmt="mxfp8_e4m3", bf16=True, plain_scales=True)]
    for d in dropped:
        vendor = d.pop("vendor")
        for override in (None, dict(FOLD_BIAS=True), dict(FOLD_BIAS=True, BF16_TRUNC=False)):
            cfg = lc.select_launch("gemm", vendor, override=override, **d, **kw)
            assert "FOLD_BIAS" not in cfg.meta() and "S_CVT" not in cfg.meta(), (vendor, d, override)
    for override in (None, dict(FOLD_BIAS=True, BF16_DECODE=True)):
        deq = lc.select_launch("dequant", "cuda", fmt="nvfp4", bf16=True, has_post=True, override=override, **kw)
        assert "FOLD_BIAS" not in deq.meta() and "S_CVT" not in deq.meta(), override
    with pytest.raises(ValueError, match="BF16_DECODE needs a CUDA/ROCm device"):
        lc.select_launch("gemm", "interpreter", fmt="mxfp4", bf16=True, plain_scales=True,
                         override=dict(BF16_DECODE=True, FOLD_BIAS=True), **kw)
    assert "FOLD_BIAS" not in lc.select_launch("gemm", "interpreter", fmt="mxfp4", plain_scales=True,
                                               override=dict(FOLD_BIAS=True), **kw).meta()
    off = lc.select_launch("gemm", "cuda", fmt="mxfp4", bf16=True, plain_scales=True,
                           override=dict(BF16_TRUNC=True, BF16_DECODE=True), **kw)
    assert "FOLD_BIAS" not in off.meta()  # float32 multiplies truncated: nothing to fold into
