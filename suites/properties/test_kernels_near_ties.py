"""Near-tie probes: inputs placed where one ulp in the kernels' scaling
arithmetic flips an element code, compared bitwise with the reference (CPU,
Triton interpreter): quantize codes and scales, and the qdq output.

Two-level rows (global scale gs, E4M3 block scale s): the spec quantizes
fl32(x * r) with r = fl32(gs / s) and dequantizes with fl32(s / gs).
Multiplying by a reciprocal instead (gs * fl32(1 / s), as vLLM's Triton
kernel does; s * fl32(1 / gs) at dequantization) is one ulp off for some
(gs, s), which random inputs almost never show. Here gs is generic (not a
power of two), s sweeps the E4M3 range (subnormals to 448), and the elements
are fl32(t / r) +- a few ulps for every midpoint t between adjacent element
values, so x * r lands on or next to the tie.

MX rows: the scale is a power of two and the division exact; the elements
sit at t * 2^k +- a few ulps for every midpoint t, for block scales from
2^-127 to the top of the range, under every scale mode and rounding.
"""
from __future__ import annotations

import math

import pytest
import torch

import harness.formats as hf
import harness.kernels as hk
from harness.testing.checks.bitwise import assert_bitwise_equal

ULPS = torch.arange(-3, 4, dtype=torch.int32)
# Encode-side global scales: generic float32 values (none a power of two).
GLOBAL_SCALES = (2688.0 / 7.3, 1000.0 / 3.0, 12.345678, 0.70710677, 41000.5, 97.1)
# E4M3 block-scale bytes: subnormals (0x01..0x07), the smallest normal, 1.0, up to 448.
E4M3_BYTES = (0x01, 0x03, 0x07, 0x08, 0x0B, 0x1D, 0x30, 0x38, 0x4B, 0x5D, 0x6E, 0x7E)
# E8M0 scale bytes of the MX probe: 2^-127 .. 2^127 (those whose amax fits float32).
E8M0_BYTES = (0, 1, 2, 40, 100, 126, 127, 128, 200, 240, 250, 254)


def midpoints(fmt: str) -> torch.Tensor:
    """Float32 midpoints between adjacent non-negative finite element values
    (exact: one more mantissa bit than the element has)."""
    el = hf.FORMATS[fmt].element
    vals = sorted({abs(hf.decode_value(el, c)) for c in range(el.sign_bit)} - {math.inf})
    vals = [v for v in vals if not math.isnan(v)]
    return torch.tensor([(a + b) / 2 for a, b in zip(vals, vals[1:])], dtype=torch.float32)


def around(x: torch.Tensor) -> torch.Tensor:
    """x (float32 >= 0) and its neighbours, -3 .. +3 ulps: [..., 7]."""
    return (x.view(torch.int32).unsqueeze(-1) + ULPS).view(torch.float32)


def as_blocks(amax: torch.Tensor, probes: torch.Tensor, block: int) -> torch.Tensor:
    """Rows [R, K]: row i is blocks of `block` values, each led by amax[i]
    and filled with probes[i] (alternating signs, zero padded)."""
    R, n = probes.shape
    per = block - 1
    nb = -(-n // per)
    fill = torch.zeros(R, nb * per)
    sign = torch.where(torch.arange(n) % 2 == 1, -1.0, 1.0)
    fill[:, :n] = probes * sign
    return torch.cat([amax.reshape(R, 1, 1).expand(R, nb, 1), fill.reshape(R, nb, per)], dim=2).reshape(R, -1)


def _block_scale_of(amax: torch.Tensor, fmt: str, **kw) -> torch.Tensor:
    """The reference's scale byte for a block whose only nonzero is amax (one per row)."""
    x = torch.zeros(amax.numel(), hf.FORMATS[fmt].block_size)
    x[:, 0] = amax.reshape(-1)
    return hf.quantize(x, fmt, **kw).scales[:, 0]


def check_kernels(x, fmt, mode, rounding, gs):
    where = f"{fmt} {mode} {rounding}"
    want = hf.quantize(x, fmt, mode, rounding, gs)
    got = hk.quantize(x, fmt, mode, rounding, gs, backend="triton")
    assert torch.equal(got.scales, want.scales), "scales " + where
    bad = got.codes != want.codes
    assert not bool(bad.any()), (f"codes {where}: {int(bad.sum())} differ, e.g. x={x[bad][:4].tolist()}: "
                                 f"{got.codes[bad][:4].tolist()} vs {want.codes[bad][:4].tolist()}")
    assert_bitwise_equal(hk.qdq(x, fmt, mode, rounding, gs, backend="triton"), hf.dequantize(want, x.dtype),
                         "qdq " + where)


def two_level_probe(fmt: str):
    """(x [G, R, K], gs [G, 1], r [G, R], probes [G, R, n], t [n]) of the two-level probe."""
    spec = hf.FORMATS[fmt]
    gs = torch.tensor(GLOBAL_SCALES, dtype=torch.float32).reshape(-1, 1)
    s_target = torch.tensor([hf.decode_value(hf.E4M3, b) for b in E4M3_BYTES], dtype=torch.float32)
    # amax whose block scale is s_target: s * element max / gs (the scale rounds back to s)
    amax = s_target * spec.max_normal / gs  # [G, R]
    s_byte = torch.stack([_block_scale_of(a, fmt, global_scale=g) for a, g in zip(amax, gs)])
    s = torch.tensor([[hf.decode_value(hf.E4M3, int(b)) for b in row] for row in s_byte], dtype=torch.float32)
    r = gs / s  # fl32(gs / s): the spec's encode multiplier
    t = midpoints(fmt)
    probes = around(t / r.unsqueeze(-1)).reshape(*r.shape, -1)  # [G, R, n * 7]
    assert bool((probes <= amax.unsqueeze(-1)).all()), "a probe exceeds its block amax (the scale would move)"
    x = torch.stack([as_blocks(a, p, spec.block_size) for a, p in zip(amax, probes)])
    return x, gs, r, s, probes, t


TWO_LEVEL = [f for f in hf.FORMAT_NAMES if not hf.FORMATS[f].is_mx]
MX = [f for f in hf.FORMAT_NAMES if hf.FORMATS[f].is_mx]


@pytest.mark.parametrize("fmt", TWO_LEVEL)
def test_two_level_elements_at_ties_of_x_times_gs_over_s(fmt):
    x, gs, r, s, probes, t = two_level_probe(fmt)
    # The probe is sharp: fl32(x * r) hits midpoints exactly, and where
    # r' = gs * fl32(1 / s) (the reciprocal fault) differs from r, x * r'
    # lands elsewhere at some of those ties.
    y = probes * r.unsqueeze(-1)
    on_tie = y.unflatten(-1, (t.numel(), ULPS.numel())) == t.reshape(-1, 1)
    assert int(on_tie.sum()) >= 50, int(on_tie.sum())
    r_recip = gs * (1.0 / s)
    y_recip = probes * r_recip.unsqueeze(-1)
    flips = (y != y_recip) & (on_tie.flatten(-2) | (y_recip.unflatten(-1, on_tie.shape[-2:]) == t.reshape(-1, 1))
                              .flatten(-2))
    assert int(flips.sum()) >= 5, f"the reciprocal r' moves only {int(flips.sum())} tie products"
    for rounding in hf.ROUNDINGS:
        check_kernels(x, fmt, "floor", rounding, gs)


@pytest.mark.parametrize("fmt", MX)
def test_mx_elements_at_ties_times_two_to_the_k(fmt):
    spec = hf.FORMATS[fmt]
    t = midpoints(fmt)
    amax64 = torch.tensor([spec.max_normal * 2.0 ** (b - 127) for b in E8M0_BYTES], dtype=torch.float64)
    amax = amax64.to(torch.float32)
    amax = amax[torch.isfinite(amax) & (amax > 0) & (amax.double() == amax64)]
    for mode in hf.SCALE_MODES:
        scale = hf.e8m0_to_float(_block_scale_of(amax, fmt, scale_mode=mode))  # [R]
        probes = around(t * scale.reshape(-1, 1)).reshape(amax.numel(), -1)  # t * 2^k exact (or subnormal-rounded)
        probes = torch.where(probes <= amax.reshape(-1, 1), probes, 0.0)  # keep the block's scale where it is
        x = as_blocks(amax, probes, spec.block_size)
        for rounding in hf.ROUNDINGS:
            check_kernels(x, fmt, mode, rounding, None)
