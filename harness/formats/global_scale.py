"""Per-tensor global scale conventions of two-level rows (NVFP4).

The reference uses vLLM's ENCODE-side scale gs = scale_max*elem_max/amax
(large; 448*6/amax for nvfp4).
Checkpoints store either the decode-side ModelOpt `weight_scale_2`
(amax/2688, small) or the encode-side compressed-tensors `global_scale`.
Mixing the two is a classic bug (docs/upstream-bugs.md), so every conversion is a
named function here.
"""
from __future__ import annotations

import math
import numbers

import torch

from harness.formats.host import values_readable
from harness.formats.spec import NVFP4_GS_NUMERATOR, f32, get_format

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


def check_global_scale_values(gs, what: str = "global_scale") -> None:
    """ValueError unless every value is finite and > 0 (reads a tensor on
    the host: callers decide when that is allowed, see host.py)."""
    if not isinstance(gs, torch.Tensor):
        v = f32(float(gs))  # the value the float32 scale will hold
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


def nvfp4_global_scale(amax, fmt=None) -> torch.Tensor:
    """Encode-side global scale gs_numerator/amax (float32): 448*6/amax for
    nvfp4 (fmt None), the row's scale_max*elem_max for another two-level row.
    amax == 0 (an all-zero tensor) gives 1.0: any scale quantizes zeros exactly."""
    numerator = NVFP4_GS_NUMERATOR if fmt is None else _two_level(fmt).gs_numerator
    a = _as_f32(amax, "amax")
    gs = torch.tensor(numerator, dtype=_F32, device=a.device) / a
    return torch.where(a > 0, gs, torch.ones_like(gs))


def _two_level(fmt):
    spec = get_format(fmt)
    if not spec.has_global_scale:
        raise ValueError(f"{spec.name} has no global scale (an MX row); a global scale is for two-level rows")
    return spec


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
