"""The harness's Triton kernels (harness.kernels) as an implementation: natively
on a GPU, through the Triton interpreter on CPU tensors (small inputs only).
They must match the reference in every cell: no registry entry names them."""
from __future__ import annotations

import harness.formats as hf

from harness.conformance.protocol import Implementation, Unavailable


def harness_triton() -> Implementation:
    try:
        import harness.kernels as hk
    except ImportError as e:
        raise Unavailable(f"harness.kernels does not import (triton missing?): {e}") from None

    def quantize(x, fmt, mode, rounding, gs):
        q = hk.quantize(x, fmt, mode, rounding, gs, backend="triton")
        return q.codes, q.scales

    def dequantize(codes, scales, fmt, gs, dtype):
        q = hf.QuantizedTensor(codes=codes, scales=scales, global_scale=None, fmt=fmt)
        if gs is not None:
            q.global_scale = hf.check_global_scale(gs).to(codes.device)
        return hk.dequantize(q, dtype, backend="triton")

    def qdq(x, fmt, mode, rounding, gs):
        return hk.qdq(x, fmt, mode, rounding, gs, backend="triton")

    import triton

    # The interpreter runs Python per program: keep CPU inputs small.
    return Implementation(name="harness-triton", version=f"triton-{triton.__version__}", roundings=hf.ROUNDINGS,
                          quantize=quantize, dequantize=dequantize, qdq=qdq, max_elements=16384)
