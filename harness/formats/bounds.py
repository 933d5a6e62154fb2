"""Error bounds of one QDQ, used by the property suites and `moe-harness run`.

MX: the block scale is a power of two, so x / scale is exact and the only
error is the element rounding: at most half the code spacing of the binade
holding |x / scale| (the wider of the two gaps around it), times the scale.
Saturated elements (|x / scale| > max_normal) are off by |x| - max_normal*scale.

Two-level (NVFP4): the element is rne(x * fl(gs/s)) and the result code *
fl(s/gs); the two float32 roundings of the ratios and the two products add at
most 4 units of 2^-24 relative to the half step and 6 relative to |x|
(first-order bound with u = 2^-24: |fl(a*b) - a*b| <= u*|a*b|).
"""
from __future__ import annotations

import torch

from harness.formats import scales
from harness.formats.quant import QuantizedTensor, block_scale_values, dequantize
from harness.formats.spec import U32
from harness.formats.validate import global_scale_blocks


def _half_gap(spec, v_abs: torch.Tensor) -> torch.Tensor:
    exp = ((v_abs.to(torch.float32).view(torch.int32) >> 23) & 0xFF) - 127
    exp = torch.clamp(exp, min=spec.emin, max=spec.emax)
    return torch.ldexp(torch.full_like(v_abs, 0.5), (exp - spec.mbits).to(torch.float32))


def qdq_error_bound(x: torch.Tensor, q: QuantizedTensor):
    """(bound, saturated) per element of x for the QDQ result dequantize(q, float32).

    `bound` is the allowed |dequantize(q) - x| of non-saturated finite elements;
    `saturated` marks the elements clamped at +-max_normal."""
    spec = q.spec
    el = spec.element
    B = spec.block_size
    x32 = x.to(torch.float32)
    mult = block_scale_values(q).repeat_interleave(B, dim=-1)  # dequant multiplier per element
    if spec.is_mx:
        v = (x32 / mult).abs()  # exact: mult is a power of two
        bound = _half_gap(el, v) * mult
        saturated = v > el.max_normal
    else:
        gs = q.global_scale if q.global_scale is not None else torch.ones(())
        gs = global_scale_blocks(gs, x32.shape[:-1], x32.device).squeeze(-1)
        s = scales.block_scale_decode(spec, q.scales).repeat_interleave(B, dim=-1)
        zero_scale = s == 0
        y = torch.where(zero_scale, 0.0, x32 * (gs / s)).abs()
        bound = _half_gap(el, y) * mult * (1 + 4 * U32) + x32.abs() * 6 * U32
        # A block scale that rounds to 0 (gs*amax/elem_max <= half the scale's
        # smallest subnormal, the tie to even; 2^-10 for e4m3) zeroes the block:
        # |x| <= elem_max * that / gs.
        zero_limit = spec.elem_max * spec.scale.min_subnormal / 2
        bound = torch.where(zero_scale, zero_limit / gs * (1 + 4 * U32), bound)
        saturated = y > el.max_normal
    return bound, saturated


def check_qdq_bound(x: torch.Tensor, q: QuantizedTensor):
    """Max of |err| / bound over non-saturated finite elements (<= 1 passes),
    and the boolean mask of elements that violate it."""
    deq = dequantize(q, torch.float32)
    bound, saturated = qdq_error_bound(x, q)
    err = (deq - x.to(torch.float32)).abs()
    finite = torch.isfinite(x.to(torch.float32)) & torch.isfinite(deq)
    active = finite & ~saturated
    ratio = torch.where(active & (bound > 0), err / bound, torch.zeros_like(err))
    ratio = torch.where(active & (bound == 0) & (err > 0), torch.full_like(err, float("inf")), ratio)
    return float(ratio.max()) if ratio.numel() else 0.0, ratio > 1
