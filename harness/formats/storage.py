"""Storage dtypes of codes and block scales, and their uint8 views.

Every consumer (reference, kernels, MoE loaders) reads codes and scales as
raw bytes through `code_bytes` / `scale_bytes`: a float8 tensor is viewed bit
for bit, never converted by value (an E8M0 scale 0.5 read by value is index
0, i.e. 2^-127, giving -1.17e-38 where -1.0 is right). Accepted:

    scales  uint8, or the float8 dtype of the format's scale kind:
            float8_e8m0fnu (E8M0, MX formats), float8_e4m3fn (E4M3, nvfp4)
    codes   uint8, one code per byte (fp4 also packed two per byte); for
            elements with a torch dtype (the row's element.torch_dtype:
            float8_e4m3fn for mxfp8_e4m3, float8_e5m2 for mxfp8_e5m2) also
            that dtype, as MX fp8 checkpoints store weights. torch.float4_e2m1fn_x2 is not accepted: fp4
            checkpoints (ModelOpt, compressed-tensors) store packed uint8.

Every other dtype (float32, int8, the other float8 kind, ...) is refused with
a ValueError naming the dtype, the format and what is accepted.
"""
from __future__ import annotations

import torch

from harness.formats.spec import FormatSpec, get_format


def _dtypes(*names) -> tuple:
    # Resolved with getattr: float8_e8m0fnu is missing from older torch builds.
    found = (getattr(torch, n, None) for n in names if n is not None)
    return (torch.uint8,) + tuple(d for d in found if d is not None)


def scale_dtypes(fmt) -> tuple:
    """Accepted storage dtypes of a format's block scales (uint8 first)."""
    return _dtypes(get_format(fmt).scale.torch_dtype)


def code_dtypes(fmt) -> tuple:
    """Accepted storage dtypes of a format's element codes (uint8 first)."""
    return _dtypes(get_format(fmt).element.torch_dtype)


def _as_bytes(t, spec: FormatSpec, accepted: tuple, what: str, kind: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{spec.name}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype == torch.uint8:
        return t
    if t.dtype in accepted:
        return t.view(torch.uint8)
    names = ", ".join(str(d) for d in accepted)
    raise ValueError(f"{spec.name}: {what} dtype {t.dtype} is not accepted; {kind} are stored as {names} "
                     "(read bit for bit)")


def scale_bytes(scales, fmt, what: str = "scales") -> torch.Tensor:
    """Block scales as a uint8 view (no copy); ValueError for any other dtype."""
    spec = get_format(fmt)
    kind = f"{spec.scale_kind.upper()} block scales"
    return _as_bytes(scales, spec, scale_dtypes(spec), what, kind)


def code_bytes(codes, fmt, what: str = "codes") -> torch.Tensor:
    """Element codes (or packed fp4 bytes) as a uint8 view (no copy);
    ValueError for any other dtype."""
    spec = get_format(fmt)
    return _as_bytes(codes, spec, code_dtypes(spec), what, f"{spec.element.name} element codes")
