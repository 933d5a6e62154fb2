"""The torch reference quantizer: quantize / dequantize / qdq for every format.

Shapes: x [..., K] with K % block_size == 0; codes uint8 [..., K] (one code per
byte, the element's own bit layout); scales uint8 [..., K // block].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from harness.formats import minifloat, scales
from harness.formats.storage import code_bytes, scale_bytes
from harness.formats.validate import as_global_scale, dequantize_inputs, global_scale_blocks
from harness.formats.spec import (
    E8M0_NAN,
    ROUNDINGS,
    FormatSpec,
    get_format,
)

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class QuantizedTensor:
    codes: torch.Tensor  # uint8 [..., K] (a float8 storage dtype is viewed as uint8, storage.py)
    scales: torch.Tensor  # uint8 [..., K // block] (likewise)
    global_scale: Optional[torch.Tensor]  # float32, two-level rows only (encode side)
    fmt: str
    scale_mode: str = "floor"
    rounding: str = "rne"
    dtype: torch.dtype = torch.float32  # dtype of the quantized input

    def __post_init__(self):
        # Fields are uint8 bytes for every consumer; float8 storage is viewed
        # bit for bit, any other dtype refused (ValueError).
        self.codes = code_bytes(self.codes, self.fmt)
        self.scales = scale_bytes(self.scales, self.fmt)

    @property
    def spec(self) -> FormatSpec:
        return get_format(self.fmt)

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape


def check_args(x: torch.Tensor, fmt, scale_mode: str, rounding: str, global_scale) -> FormatSpec:
    """Validate every argument; each error names the offending value."""
    spec = get_format(fmt)
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"x dtype {x.dtype} is not supported; expected float32, bfloat16 or float16")
    if x.dim() == 0 or x.shape[-1] % spec.block_size != 0:
        raise ValueError(
            f"{spec.name}: last dimension K={tuple(x.shape)[-1:] or ()} of shape {tuple(x.shape)} "
            f"is not a multiple of the block size {spec.block_size}"
        )
    if rounding not in ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; expected one of {', '.join(ROUNDINGS)}")
    spec.check_options(scale_mode, global_scale)
    return spec


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    return x.to(torch.float32).reshape(*x.shape[:-1], x.shape[-1] // block, block)


def _quantize_mx(xb: torch.Tensor, spec: FormatSpec, scale_mode: str, rounding: str):
    amax = xb.abs().amax(dim=-1)
    # amax hides a NaN only where the block also holds an Inf; both give 0xFF.
    nonfinite = ~torch.isfinite(xb).all(dim=-1)
    byte = scales.mx_scale_byte(torch.where(nonfinite, torch.inf, amax), spec, scale_mode)
    v = xb * scales.e8m0_inverse(byte).unsqueeze(-1)  # exact power-of-two scaling
    codes = minifloat.encode(spec.element, v, rounding)
    nan_block = (byte == E8M0_NAN).unsqueeze(-1)
    codes = torch.where(nan_block, _block_nan_code(spec, xb), codes)
    return codes, byte


def _block_nan_code(spec: FormatSpec, xb: torch.Tensor) -> torch.Tensor:
    """Element code inside a NaN-scaled block: the NaN code where the format has
    one, else the sign bit alone (the NaN scale carries the NaN)."""
    nan = spec.element.nan_code
    return _sign_only(spec, xb) | (nan if nan is not None else 0)


def _sign_only(spec: FormatSpec, xb: torch.Tensor) -> torch.Tensor:
    """The code of a signed zero per element: -0 for negative inputs."""
    return (xb.view(torch.int32) < 0).to(torch.uint8) * spec.element.neg_zero_code


def _quantize_two_level(xb: torch.Tensor, spec: FormatSpec, gs: torch.Tensor, rounding: str):
    amax = xb.abs().amax(dim=-1, keepdim=True)
    nan_block = torch.isnan(xb).any(dim=-1, keepdim=True)
    # Operation order is part of the spec: gs * (amax * fl(1/elem_max)), all
    # float32 (nvfp4: fl(1/6), as vLLM).
    s_f = torch.clamp(gs * (amax * spec.inv_elem_max), -spec.scale_max, spec.scale_max)
    s_f = torch.where(nan_block, torch.nan, s_f)
    s_code = scales.block_scale_encode(spec, s_f)
    s = scales.block_scale_decode(spec, s_code)
    r = gs / s  # fl32(gs / s) computed first, as vLLM's Triton kernel
    y = torch.clamp(xb * r, -spec.elem_max, spec.elem_max)
    codes = minifloat.encode(spec.element, y, rounding)
    codes = torch.where((s == 0) | nan_block, _sign_only(spec, xb), codes)
    return codes, s_code.squeeze(-1)


def quantize(x: torch.Tensor, fmt, scale_mode: str = "floor", rounding: str = "rne", global_scale=None) -> QuantizedTensor:
    """Quantize x [..., K] to element codes + block scales (see docs/design.md)."""
    spec = check_args(x, fmt, scale_mode, rounding, global_scale)
    xb = _blocks(x, spec.block_size)
    gs_t = None
    if spec.is_mx:
        codes, byte = _quantize_mx(xb, spec, scale_mode, rounding)
    else:
        gs_t = as_global_scale(1.0 if global_scale is None else global_scale, x.device)
        gsb = global_scale_blocks(gs_t, x.shape[:-1], x.device)
        codes, byte = _quantize_two_level(xb, spec, gsb, rounding)
    return QuantizedTensor(
        codes=codes.reshape(x.shape),
        scales=byte,
        global_scale=gs_t,
        fmt=spec.name,
        scale_mode=scale_mode,
        rounding=rounding,
        dtype=x.dtype,
    )


def _block_multipliers(spec: FormatSpec, byte: torch.Tensor, gs, lead_shape) -> torch.Tensor:
    if spec.is_mx:
        return scales.e8m0_to_float(byte)
    s = scales.block_scale_decode(spec, byte)
    return s / global_scale_blocks(gs, lead_shape, s.device).squeeze(-1)


def block_scale_values(q: QuantizedTensor) -> torch.Tensor:
    """float32 multiplier per block applied to decoded elements at dequantization:
    2^(byte-127) for MX, fl32(s / gs) for two-level rows."""
    codes, byte, gs = dequantize_inputs(q.codes, q.scales, q.global_scale, q.fmt)
    return _block_multipliers(q.spec, byte, gs, codes.shape[:-1])


def _check_out_dtype(dtype) -> None:
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dequantize dtype {dtype} is not supported; expected float32, bfloat16 or float16")


def dequantize_without_value_checks(q: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """dequantize for hot paths (MoE forward, CUDA graph capture, inputs made
    by the quantizer or checked at load): the same checks minus those that
    read values (validate.py says what then happens to bad values)."""
    _check_out_dtype(dtype)
    return _dequantize(q.spec, *dequantize_inputs(q.codes, q.scales, q.global_scale, q.fmt, read_values=False),
                       dtype)


def dequantize(q: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Codes + scales -> values in `dtype` (computed in float32, then cast)."""
    _check_out_dtype(dtype)
    return _dequantize(q.spec, *dequantize_inputs(q.codes, q.scales, q.global_scale, q.fmt), dtype)


def _dequantize(spec: FormatSpec, codes, byte, gs, dtype) -> torch.Tensor:
    nb = codes.shape[-1] // spec.block_size
    vals = minifloat.decode(spec.element, codes).reshape(*codes.shape[:-1], nb, spec.block_size)
    out = vals * _block_multipliers(spec, byte, gs, codes.shape[:-1]).unsqueeze(-1)
    return out.reshape(codes.shape).to(dtype)


def qdq(x: torch.Tensor, fmt, scale_mode: str = "floor", rounding: str = "rne", global_scale=None) -> torch.Tensor:
    """Quantize then dequantize; same dtype and shape as x."""
    # The quantizer's own output needs no value check.
    return dequantize_without_value_checks(quantize(x, fmt, scale_mode, rounding, global_scale), x.dtype)
