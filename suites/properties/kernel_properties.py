"""Triton kernels against the reference: the comparison, the corner inputs
and the property bodies shared by test_kernels.py (CPU, Triton interpreter),
test_kernels_gpu.py and test_synthetic_rows.py (the same properties on rows
added to the format table for one test).

A property body takes (fmt, data) with `data` a hypothesis data object; each
caller wraps it in its own @given and budget."""
from __future__ import annotations

import itertools
import math

import torch
from hypothesis import strategies as st

import harness.formats as hf
import harness.kernels as hk
import harness.strategies as hs
from harness.testing.checks.bitwise import assert_bitwise_equal

FMTS = hf.FORMAT_NAMES
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def options(fmt, mode, gs):
    """The reference accepts scale modes for MX only and a global scale for nvfp4 only."""
    spec = hf.FORMATS[fmt]
    return (mode if spec.is_mx else "floor"), (None if spec.is_mx else gs)


def check_all_kernels(x, fmt, mode, rounding, gs, backend="triton", device="cpu"):
    """qdq, quantize (codes, packed) and dequantize of one input vs the
    reference. The kernels run on `device`; the reference always runs on CPU
    (the oracle), and results are compared there."""
    spec = hf.FORMATS[fmt]
    where = f"{fmt} {mode} {rounding} gs={gs} {x.dtype} {tuple(x.shape)}"
    want = hf.quantize(x, fmt, mode, rounding, gs)
    xd = x.to(device)
    gsd = gs.to(device) if isinstance(gs, torch.Tensor) else gs
    got_y = hk.qdq(xd, fmt, mode, rounding, gsd, backend=backend).cpu()
    assert_bitwise_equal(got_y, hf.dequantize(want, x.dtype), "qdq " + where)
    got = hk.quantize(xd, fmt, mode, rounding, gsd, backend=backend)
    assert torch.equal(got.codes.cpu(), want.codes), "codes " + where
    assert torch.equal(got.scales.cpu(), want.scales), "scales " + where
    assert (got.global_scale is None) == (want.global_scale is None)
    if spec.is_fp4:
        packed, scales = hk.quantize_packed(xd, fmt, mode, rounding, gsd, backend=backend)
        assert torch.equal(packed.cpu(), hf.pack_fp4(want.codes)), "packed " + where
        assert torch.equal(scales.cpu(), want.scales)
    qd = hf.QuantizedTensor(
        codes=want.codes.to(device), scales=want.scales.to(device),
        global_scale=None if want.global_scale is None else want.global_scale.to(device), fmt=fmt,
    )
    # (dequantize to other dtypes: dequantize_any_bytes draws the dtype)
    assert_bitwise_equal(hk.dequantize(qd, x.dtype, backend=backend).cpu(), hf.dequantize(want, x.dtype),
                         f"dequantize->{x.dtype} " + where)


def _fit(row, n):
    """Exactly n values: evenly spaced picks from a long row, a short row cycled."""
    return [row[(i * len(row)) // n] if len(row) >= n else row[i % len(row)] for i in range(n)]


def corner_tensor(fmt: str, dtype) -> torch.Tensor:
    """Blocks of hand-picked corners: ties between every pair of adjacent codes
    (anchored by max_normal so the block scale makes them exact ties), values
    at and past max_normal, signed zeros, the 'even' scale thresholds, huge and
    tiny blocks, NaN and Inf."""
    spec = hf.FORMATS[fmt]
    B, el, m = spec.block_size, spec.element, spec.max_normal
    vals = sorted({abs(hf.decode_value(el, c)) for c in range(el.sign_bit)} - {math.inf})
    vals = [v for v in vals if math.isfinite(v)]
    ties = [(a + b) / 2 for a, b in zip(vals, vals[1:])]
    rows = []
    for e in (-20, 0, 7):
        row = _fit([t * (-1) ** i for i, t in enumerate(ties)], B - 1) + [m]
        rows.append([math.ldexp(v, e) for v in row])
    rows.append(_fit([m, -m * 1.5, m * 1.0625, -0.0, 0.0, m / 3, m * 0.99, -m * 0.51], B))
    rows.append(_fit([-0.0, 0.0], B))
    rows.append(_fit([1.0, math.ldexp(1.75, 3), math.ldexp(1.9375, -2), math.ldexp(1.875, 5), 7.0, 448.0, 1e-30], B))
    rows.append(_fit([3e38, -1.5e38, 1.0, 2.0**-126], B))
    rows.append(_fit([math.nan, 1.0, -2.0, 0.5], B))
    rows.append(_fit([math.inf, 1.0, -3.0, 0.25], B))
    return torch.tensor(rows, dtype=torch.float64).to(torch.float32).to(dtype)


def kernels_match_reference(fmt, data):
    """Drawn blocks (NaN / Inf included), scale mode, global scale, rounding
    and leading shape: every kernel gives the reference's bits."""
    case = data.draw(hs.block_tensors(fmt, allow_nan_inf=True, max_rows=3, max_blocks=3), label="case")
    mode, gs = options(fmt, data.draw(hs.scale_modes(), label="mode"), data.draw(hs.global_scales(), label="gs"))
    rounding = data.draw(hs.roundings(), label="rounding")
    x = case.x
    if data.draw(st.booleans(), label="3d"):  # any leading shape
        x = x.reshape(1, *x.shape)
    check_all_kernels(x, fmt, mode, rounding, gs)


def dequantize_any_bytes(fmt, data):
    """Every code byte (NaN / Inf codes included) and every scale byte (E8M0
    0xFF, E4M3 NaN and negative scales included) decodes like the reference."""
    spec = hf.FORMATS[fmt]
    rows = data.draw(st.integers(1, 3), label="rows")
    nb = data.draw(st.integers(1, 2), label="blocks")
    n = rows * nb * spec.block_size
    codes = data.draw(st.lists(st.integers(0, (1 << spec.element.width) - 1), min_size=n, max_size=n), label="codes")
    scales = data.draw(st.lists(st.integers(0, 255), min_size=rows * nb, max_size=rows * nb), label="scales")
    gs = None if spec.is_mx else torch.tensor(data.draw(hs.global_scales(allow_none=False), label="gs"))
    q = hf.QuantizedTensor(
        codes=torch.tensor(codes, dtype=torch.uint8).reshape(rows, nb * spec.block_size),
        scales=torch.tensor(scales, dtype=torch.uint8).reshape(rows, nb),
        global_scale=gs,
        fmt=fmt,
    )
    dtype = data.draw(hs.dtypes(DTYPES), label="dtype")
    assert_bitwise_equal(hk.dequantize(q, dtype, backend="triton"), hf.dequantize(q, dtype), f"{fmt} {dtype}")


def every_mode_rounding_dtype_on_corners(fmt):
    """The full product of scale modes x roundings x input dtypes on the corner
    tensor."""
    spec = hf.FORMATS[fmt]
    modes = hf.SCALE_MODES if spec.is_mx else ("floor",)
    for mode, rounding, dtype in itertools.product(modes, hf.ROUNDINGS, DTYPES):
        x = corner_tensor(fmt, dtype)
        gs = None if spec.is_mx else 2688.0 / 7.25
        check_all_kernels(x, fmt, mode, rounding, gs)


def bf16_operand_is_the_ops(device="cpu"):
    """qdq's bf16_operand, the QDQ written as a bf16 GEMM's operand: the
    reference's QDQ in float32 (times the one global scale of a two-level
    row), rounded once to bfloat16, bit for bit (NaN == NaN), for every
    format, scale mode, rounding and input dtype on the corner tensor plus
    rows spread over 2^-30..2^30 and a block at float16's largest value
    (an MX QDQ can round it up past float16's range: a pass through float16
    would give Inf), two-level rows with global scales from 2^-20 to 1e6.
    The Triton kernel on `device` and, on CPU, harness.moe.ops' torch path
    as well."""
    from harness.moe import ops as moe_ops

    g = torch.Generator().manual_seed(5)
    for fmt in FMTS:
        spec = hf.FORMATS[fmt]
        B = spec.block_size
        spread = torch.randn(4, 2 * B, generator=g) * torch.exp2(torch.randint(-30, 30, (4, 2 * B), generator=g).float())
        spread[0, :B] = torch.tensor(_fit([65504.0, -1.0, 0.5, 3.0], B))
        modes = ("floor",) if spec.has_global_scale else hf.SCALE_MODES
        scales = (1.0, 2688.0 / 7.25, 2.0 ** -20, 1e6) if spec.has_global_scale else (None,)
        for mode, rounding, dtype in itertools.product(modes, hf.ROUNDINGS, DTYPES):
            c = corner_tensor(fmt, dtype)
            x = torch.cat([c, torch.cat([spread.to(dtype)] * math.ceil(c.shape[1] / (2 * B)), 1)[:, : c.shape[1]]])
            for gv in scales:
                gs = None if gv is None else torch.tensor(gv)
                where = f"{fmt} {mode} {rounding} {dtype} gs={gv}"
                want = hf.qdq(x.to(torch.float32), fmt, mode, rounding, gs)
                want = (want if gs is None else want * gs).to(torch.bfloat16)
                got = hk.qdq(x.to(device), fmt, mode, rounding, None if gs is None else gs.to(device),
                             backend="triton", bf16_operand=True)
                assert_bitwise_equal(got.cpu(), want, "kernel bf16_operand " + where)
                if device == "cpu":
                    got = moe_ops.qdq(x, fmt, scale_mode=mode, rounding=rounding, global_scale=gs, backend="torch",
                                      bf16_operand=True)
                    assert_bitwise_equal(got, want, "torch bf16_operand " + where)
