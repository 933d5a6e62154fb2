"""User implementations with planted bugs, loaded by `--impl module:object`.

ties_away     the reference, but ties rounded away from zero when asked for
              round-to-nearest-even
scale_low     the reference, but the E8M0 byte one low when amax is exactly a
              power of two (a threshold of floor mode); elements re-encoded
              against the lower scale (so they saturate)
"""
import torch

import harness.formats as hf
from harness.conformance import Implementation
from harness.formats import minifloat, scales


def _ties_away_quantize(x, fmt, mode, rounding, gs):
    q = hf.quantize(x, fmt, mode, "away", gs)
    return q.codes, q.scales


def _scale_low_quantize(x, fmt, mode, rounding, gs):
    spec = hf.get_format(fmt)
    q = hf.quantize(x, fmt, mode, rounding, gs)
    xb = x.to(torch.float32).reshape(*x.shape[:-1], -1, spec.block_size)
    amax = xb.abs().amax(-1)
    pow2 = (amax.view(torch.int32) & 0x7FFFFF) == 0
    hit = pow2 & (amax > 0) & torch.isfinite(amax) & (q.scales > 0) & (q.scales < 255)
    byte = torch.where(hit, q.scales - 1, q.scales).to(torch.uint8)
    codes = minifloat.encode(spec.element, xb * scales.e8m0_inverse(byte).unsqueeze(-1), rounding)
    codes = torch.where(hit.unsqueeze(-1), codes, q.codes.reshape(codes.shape))
    return codes.reshape(x.shape), byte


def _qdq_from(quantize):
    def qdq(x, fmt, mode, rounding, gs):
        codes, s = quantize(x, fmt, mode, rounding, gs)
        return hf.dequantize(hf.QuantizedTensor(codes=codes, scales=s, global_scale=None, fmt=fmt), x.dtype)
    return qdq


ties_away = Implementation(name="ties-away", version="1.0", formats=hf.MX_FORMAT_NAMES, scale_modes=("floor",),
                           quantize=_ties_away_quantize, qdq=_qdq_from(_ties_away_quantize))
scale_low = Implementation(name="scale-low", version="1.0", formats=hf.MX_FORMAT_NAMES, scale_modes=("floor",),
                           quantize=_scale_low_quantize, qdq=_qdq_from(_scale_low_quantize))


def ties_away_qdq(x):
    """A kernel-team style qdq for mxfp4 / rne with the ties bug (plugin test)."""
    return hf.qdq(x, "mxfp4", "floor", "away")
