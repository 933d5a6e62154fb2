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

from harness.moe import ops
from harness.schemes import PER_TENSOR_FORMATS

_NON_FORMAT_KINDS = {None: "none", **{name: "per_tensor" for name in PER_TENSOR_FORMATS}}


def _format_kind(spec) -> str:
    return "two_level" if spec.has_global_scale else "mx"


def quant_kind(quant_dtype) -> str:
    """Dispatch kind of a key: every harness.formats row is a key of its own,
    its kind read from the row (the table as it is now); ValueError otherwise."""
    if isinstance(quant_dtype, str) and quant_dtype in hf.FORMATS:
        return _format_kind(hf.FORMATS[quant_dtype])
    if (quant_dtype is None or isinstance(quant_dtype, str)) and quant_dtype in _NON_FORMAT_KINDS:
        return _NON_FORMAT_KINDS[quant_dtype]
    keys = list(_NON_FORMAT_KINDS) + list(hf.FORMATS)
    raise ValueError(f"unknown activation quant dtype {quant_dtype!r}; expected one of "
                     f"{', '.join(repr(k) for k in keys)}")


# dispatch key -> kind, as the table was at import (for introspection).
QUANT_DTYPES: dict = dict(_NON_FORMAT_KINDS)
QUANT_DTYPES.update({name: _format_kind(spec) for name, spec in hf.FORMATS.items()})


def moe_kernel_quantize_input(A, A_scale, quant_dtype, *, scale_mode: str = "even", rounding: str = "rne",
                              quantization_emulation: bool = True, backend: str = "auto",
                              bf16_operand: bool = False):
    """Returns (A_qdq, None): A quantized and dequantized, same shape and dtype.

    bf16_operand (MX and two-level keys): A_qdq comes as the bf16 GEMM's
    operand instead, the float32 QDQ rounded once to bfloat16; two-level
    keys with the global scale put back, bfloat16(A_qdq * A_scale) (codes
    times block scales), for a GEMM that applies 1 / A_scale after its dot.
    It is still the one QDQ of that input, only written in another form.

    Only emulation exists here (QDQ, no packed output), so
    quantization_emulation=False is refused rather than ignored."""
    kind = quant_kind(quant_dtype)
    if not quantization_emulation:
        raise ValueError("moe_kernel_quantize_input: only quantization_emulation=True is implemented")
    if bf16_operand and kind not in ("mx", "two_level"):
        raise ValueError(f"moe_kernel_quantize_input: bf16_operand writes a block format's QDQ for a bf16 GEMM; "
                         f"{quant_dtype!r} is {kind}")
    if kind == "none":
        return A, None
    if kind == "two_level":
        if A_scale is None:
            raise ValueError(f"{quant_dtype} activation quantization needs A_scale (the encode-side global scale "
                             "a1_gscale/a2_gscale); got None")
        return ops.qdq(A, quant_dtype, rounding=rounding, global_scale=A_scale, backend=backend,
                       bf16_operand=bf16_operand), None
    if kind == "per_tensor":
        return ops.e4m3_qdq_per_tensor(A, A_scale), None
    return ops.qdq(A, quant_dtype, scale_mode=scale_mode, rounding=rounding, backend=backend,
                   bf16_operand=bf16_operand), None
