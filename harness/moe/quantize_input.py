"""moe_kernel_quantize_input: the ONE activation quantization dispatcher.

Every GEMM input of every scheme goes through this function exactly once per
forward. The dispatch table is data (`QUANT_DTYPES`); a key that is not in it
raises ValueError -- an unknown dtype must never fall through to "no
quantization" (an upstream bug silently skipped activation QDQ for a dtype
string that was not a dispatch key).

A_scale meaning per key:
  two-level formats (nvfp4): the ENCODE-side activation global scale
           (a1_gscale / a2_gscale, 448*6/amax for nvfp4); None -> ValueError
           (never silently 1.0).
  "fp8":   the DECODE-side per-tensor scale (x ~= q * A_scale); None -> dynamic
           per-tensor scale amax/448, computed on the device.
  MX keys: no scale (block scales are computed); A_scale is ignored.
  None:    no quantization; A is returned unchanged.
"""
from __future__ import annotations

import harness.formats as hf

from . import ops

# dispatch key -> kind; every harness.formats format is a key of its own,
# its kind read from the row.
QUANT_DTYPES: dict = {None: "none", "fp8": "fp8_per_tensor"}
QUANT_DTYPES.update({name: "two_level" if spec.has_global_scale else "mx" for name, spec in hf.FORMATS.items()})


def moe_kernel_quantize_input(A, A_scale, quant_dtype, *, scale_mode: str = "even", rounding: str = "rne",
                              quantization_emulation: bool = True, backend: str = "auto"):
    """Returns (A_qdq, None): A quantized and dequantized, same shape and dtype.

    Only emulation exists here (QDQ, no packed output), so
    quantization_emulation=False is refused rather than ignored."""
    if quant_dtype not in QUANT_DTYPES:
        raise ValueError(f"unknown activation quant dtype {quant_dtype!r}; expected one of "
                         f"{', '.join(repr(k) for k in QUANT_DTYPES)}")
    if not quantization_emulation:
        raise ValueError("moe_kernel_quantize_input: only quantization_emulation=True is implemented")
    kind = QUANT_DTYPES[quant_dtype]
    if kind == "none":
        return A, None
    if kind == "two_level":
        if A_scale is None:
            raise ValueError(f"{quant_dtype} activation quantization needs A_scale (the encode-side global scale "
                             "a1_gscale/a2_gscale); got None")
        return ops.qdq(A, quant_dtype, rounding=rounding, global_scale=A_scale, backend=backend), None
    if kind == "fp8_per_tensor":
        return ops.e4m3_qdq_per_tensor(A, A_scale), None
    return ops.qdq(A, quant_dtype, scale_mode=scale_mode, rounding=rounding, backend=backend), None
