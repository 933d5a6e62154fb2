"""Checks of quantized inputs, shared by the reference (harness.formats) and
the kernels (harness.kernels), so both refuse the same bad input with the same
ValueError.

Value checks (code range, global scale finite and > 0) read tensors only where
harness.formats.host allows it: CPU tensors by default, any device when asked
explicitly (`read_values=True`, e.g. at checkpoint load), never while tracing.
Where they are skipped (device tensors on hot paths, CUDA graph capture),
reference and kernels agree bit for bit instead: an element code is read as
its low `width` bits only (both decoders mask), and a zero global scale
divides to +-Inf (0/0 NaN) in both.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from harness.formats.global_scale import check_global_scale_kind, check_global_scale_values
from harness.formats.host import values_readable
from harness.formats.spec import FormatSpec, get_format
from harness.formats.storage import code_bytes, scale_bytes

_F32 = torch.float32


def check_code_range(codes: torch.Tensor, fmt, packed: bool = False, what: str = "codes",
                     read_values: Optional[bool] = None) -> None:
    """ValueError if a one-code-per-byte tensor holds a code wider than the
    element (fp4 > 0x0F, fp6 > 0x3F). Every byte is a valid fp8 code and a
    valid pair of packed fp4 codes, so those are never read."""
    spec = get_format(fmt)
    width = spec.element.width
    if packed or width >= 8 or codes.numel() == 0 or not values_readable(codes, read_values):
        return
    top = int(codes.max())
    if top >> width:
        raise ValueError(f"{spec.name}: element code 0x{top:02X} in {what} is out of range for "
                         f"{width}-bit {spec.element.name} codes (0x00..0x{(1 << width) - 1:02X}, one per byte)")


def check_codes(codes: torch.Tensor, fmt, packed: bool = False, what: str = "codes") -> torch.Tensor:
    """Explicit check of stored codes on any device (reads them: a sync on a
    GPU; for load time, not hot paths). Returns the uint8 view."""
    codes = code_bytes(codes, fmt, what)
    check_code_range(codes, fmt, packed, what, read_values=True)
    return codes


def check_same_device(fmt, **tensors) -> None:
    """ValueError naming each tensor's device unless they share one."""
    devices = {name: t.device for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    if len(set(devices.values())) > 1:
        where = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"{get_format(fmt).name}: {where}; they must be on one device")


def as_global_scale(value, device: torch.device, what: str = "global_scale",
                    read_values: Optional[bool] = None) -> torch.Tensor:
    """A global scale (real number or real tensor) as float32 on `device`.

    A tensor must already be on `device` or on the CPU (a host scale is
    moved). A number is filled on the device (no host-to-device copy, so this
    is allowed during graph capture) and always checked, being on the host."""
    check_global_scale_kind(value, what)
    if isinstance(value, torch.Tensor):
        t = value.to(_F32)
        if t.device != device and t.device.type != "cpu":
            raise ValueError(f"{what} is on {t.device} but the data is on {device}; it must be on the data's device or the CPU")
        if values_readable(t, read_values):
            check_global_scale_values(t, what)
        return t.to(device)
    check_global_scale_values(value, what)
    return torch.full((), float(value), dtype=_F32, device=device)


def check_global_scale_shape(gs_shape, lead_shape, what: str = "global_scale") -> tuple:
    """The global scale's shape with trailing size-1 dims beyond the leading
    rank dropped; ValueError unless it broadcasts to the leading dims exactly
    (a scalar, one per row, or one per group of rows such as [E, 1])."""
    gs_shape, lead = tuple(gs_shape), tuple(lead_shape)
    while len(gs_shape) > len(lead) and gs_shape[-1] == 1:
        gs_shape = gs_shape[:-1]
    aligned = (1,) * (len(lead) - len(gs_shape)) + gs_shape
    if len(gs_shape) > len(lead) or any(g not in (1, n) for g, n in zip(aligned, lead)):
        raise ValueError(f"{what} of shape {tuple(gs_shape)} does not broadcast to the leading dims {lead} "
                         "of the data")
    return gs_shape


def global_scale_blocks(gs: torch.Tensor, lead_shape, device) -> torch.Tensor:
    """The reference's broadcasting of a global scale: to [..., nblocks, 1]
    of data with leading dims `lead_shape`: a scalar, or a tensor broadcastable
    to the leading dims (e.g. one per expert, shape [E, 1])."""
    gs = gs.to(device=device, dtype=_F32)
    gs = gs.reshape(check_global_scale_shape(gs.shape, lead_shape))
    return gs.reshape(*gs.shape, 1, 1) if gs.dim() else gs


def global_scale_rows(gs: torch.Tensor, lead_shape) -> torch.Tensor:
    """The same broadcasting as a flat [G] tensor (the kernels' layout): row r
    (leading dims flattened) uses gs[r // (rows / G)]. A scale that varies
    along a non-leading pattern is expanded to one value per row."""
    lead = tuple(lead_shape)
    gs = gs.reshape(check_global_scale_shape(gs.shape, lead))
    if gs.numel() == 1:
        return gs.reshape(1)
    aligned = (1,) * (len(lead) - gs.dim()) + tuple(gs.shape)
    # A prefix of the leading dims, then only size-1 dims: one value per group of rows.
    for k in range(len(lead) + 1):
        if aligned[:k] == lead[:k] and all(d == 1 for d in aligned[k:]):
            return gs.reshape(math.prod(lead[:k])).contiguous()
    return torch.broadcast_to(gs, lead).reshape(-1).contiguous()


def check_scales_shape(spec: FormatSpec, codes_shape, scales_shape) -> None:
    if len(codes_shape) and codes_shape[-1] % spec.block_size:
        raise ValueError(f"{spec.name}: codes shape {tuple(codes_shape)}: last dimension is not a multiple of "
                         f"the block size {spec.block_size}")
    nb = codes_shape[-1] // spec.block_size if len(codes_shape) else 0
    want = tuple(codes_shape[:-1]) + (nb,)
    if not len(codes_shape) or tuple(scales_shape) != want:
        raise ValueError(f"{spec.name}: scales shape {tuple(scales_shape)} does not match codes shape "
                         f"{tuple(codes_shape)} (expected {want})")


def dequantize_inputs(codes, scales, global_scale, fmt, read_values: Optional[bool] = None
                      ) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """(codes uint8, scales uint8, global scale float32 on the codes' device
    or None) of a QuantizedTensor's fields, checked: storage dtypes, shapes,
    devices, and where readable the code range and global scale values.
    A two-level row without a global scale uses 1.0, as the quantizer does."""
    spec = get_format(fmt)
    codes = code_bytes(codes, spec)
    scales = scale_bytes(scales, spec)
    check_same_device(spec, codes=codes, scales=scales)
    check_scales_shape(spec, codes.shape, scales.shape)
    check_code_range(codes, spec, read_values=read_values)
    if not spec.has_global_scale:
        spec.check_global_scale_arg(global_scale)
        return codes, scales, None
    if global_scale is None:
        return codes, scales, torch.ones((), dtype=_F32, device=codes.device)
    gs = as_global_scale(global_scale, codes.device, read_values=read_values)
    check_global_scale_shape(gs.shape, codes.shape[:-1])
    return codes, scales, gs
