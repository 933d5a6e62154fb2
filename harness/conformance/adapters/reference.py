"""The harness's own torch reference as an implementation: running it against
itself must give 100% in every cell (a self-check of the machinery)."""
from __future__ import annotations

import harness.formats as hf

from harness.conformance.protocol import Implementation


def _quantize(x, fmt, mode, rounding, gs):
    q = hf.quantize(x, fmt, mode, rounding, gs)
    return q.codes, q.scales


def _dequantize(codes, scales, fmt, gs, dtype):
    q = hf.QuantizedTensor(codes=codes, scales=scales, global_scale=None if gs is None else hf.check_global_scale(gs),
                           fmt=fmt)
    return hf.dequantize(q, dtype)


def reference() -> Implementation:
    return Implementation(name="reference", version="0.1.0", roundings=hf.ROUNDINGS, quantize=_quantize,
                          dequantize=_dequantize, qdq=lambda x, fmt, mode, r, gs: hf.qdq(x, fmt, mode, r, gs))
