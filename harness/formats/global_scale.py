"""NVFP4 per-tensor global scale conventions.

The reference uses vLLM's ENCODE-side scale gs = 448*6/amax (large).
Checkpoints store either the decode-side ModelOpt `weight_scale_2`
(amax/2688, small) or the encode-side compressed-tensors `global_scale`.
Mixing the two is a classic bug (docs/upstream-bugs.md), so every conversion is a
named function here.
"""
from __future__ import annotations

import math
import numbers
import struct

import torch

from .host import values_readable
from .spec import NVFP4_GS_NUMERATOR

_F32 = torch.float32


def check_global_scale_kind(value, what: str = "global_scale") -> None:
    """ValueError unless value is a real number or a real tensor: a string, a
    list, a bool or a complex is refused, so every entry point accepts the
    same things."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.is_complex():
            raise ValueError(f"{what} must be a real tensor, got dtype {value.dtype}")
        return
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ValueError(f"{what} must be a real number or a torch.Tensor, got {type(value).__name__} {value!r:.60}")


def _as_f32(value, what: str) -> torch.Tensor:
    check_global_scale_kind(value, what)
    if isinstance(value, torch.Tensor):
        return value.to(_F32)
    return torch.tensor(float(value), dtype=_F32)


def _to_float32(v: float) -> float:
    """Round a Python float to float32 (nearest even) without making a tensor."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def check_global_scale_values(gs, what: str = "global_scale") -> None:
    """ValueError unless every value is finite and > 0 (reads a tensor on
    the host: callers decide when that is allowed, see host.py)."""
    if not isinstance(gs, torch.Tensor):
        v = _to_float32(float(gs))  # the value the float32 scale will hold
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{what} must be finite and > 0, got [{v}]")
        return
    t = gs.detach().to("cpu", _F32)
    bad = ~(torch.isfinite(t) & (t > 0))
    if bool(bad.any()):
        raise ValueError(f"{what} must be finite and > 0, got {t[bad].flatten()[:4].tolist()}")


def check_global_scale(gs, what: str = "global_scale") -> torch.Tensor:
    """float32 tensor of a positive finite scale; ValueError naming the problem.

    Values are read only where they are on the host (harness.formats.host):
    Python numbers and CPU tensors. Device-resident scales are checked where
    they are made (on the host, before they move)."""
    t = _as_f32(gs, what)
    if values_readable(t):
        check_global_scale_values(t, what)
    return t


def nvfp4_global_scale(amax) -> torch.Tensor:
    """Encode-side global scale 448*6/amax (float32). amax == 0 (an all-zero
    tensor) gives 1.0: any scale quantizes zeros exactly."""
    a = _as_f32(amax, "amax")
    gs = torch.tensor(NVFP4_GS_NUMERATOR, dtype=_F32, device=a.device) / a
    return torch.where(a > 0, gs, torch.ones_like(gs))


def global_scale_from_modelopt(weight_scale_2) -> torch.Tensor:
    """ModelOpt stores the DECODE-side weight_scale_2 = amax/2688: invert it."""
    ws2 = check_global_scale(weight_scale_2, "weight_scale_2")
    return 1.0 / ws2


def global_scale_from_compressed_tensors(global_scale) -> torch.Tensor:
    """compressed-tensors stores the ENCODE-side global_scale = 2688/amax already."""
    return check_global_scale(global_scale, "global_scale")


def global_scale_to_modelopt(gs) -> torch.Tensor:
    """Encode-side gs -> ModelOpt decode-side weight_scale_2 = 1/gs."""
    return 1.0 / check_global_scale(gs)
