"""NVFP4 per-tensor global scale conventions.

The reference uses vLLM's ENCODE-side scale gs = 448*6/amax (large).
Checkpoints store either the decode-side ModelOpt `weight_scale_2`
(amax/2688, small) or the encode-side compressed-tensors `global_scale`.
Mixing the two is a classic bug (UPSTREAM-BUGS.md), so every conversion is a
named function here.
"""
from __future__ import annotations

import torch

from .spec import NVFP4_GS_NUMERATOR

_F32 = torch.float32


def _as_f32(value, what: str) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=_F32) if not isinstance(value, torch.Tensor) else value.to(_F32)
    return t


def check_global_scale(gs, what: str = "global_scale") -> torch.Tensor:
    """float32 tensor of a positive finite scale; ValueError naming the problem.

    The check reads values on the host, so it runs for Python numbers and CPU
    tensors only: reading a device tensor would synchronize the stream on every
    call (and is forbidden during CUDA graph capture). Device-resident scales
    are checked where they are made (on the host, before they move)."""
    t = _as_f32(gs, what)
    if t.is_floating_point() and t.device.type == "cpu":
        bad = ~(torch.isfinite(t) & (t > 0))
        if bool(bad.any()):
            raise ValueError(f"{what} must be finite and > 0, got {t[bad].flatten()[:4].tolist()}")
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
