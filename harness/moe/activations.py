"""Expert activations on the GEMM1 output h [P, 2I] (gate = h[:, :I], up =
h[:, I:], the w13 layout "gate then up"), computed in float32."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.kernels.fused_act import SWIGLU_ALPHA, SWIGLU_LIMIT  # the constants live with the kernel


def silu_and_mul(h: torch.Tensor) -> torch.Tensor:
    i = h.shape[-1] // 2
    return F.silu(h[..., :i]) * h[..., i:]


def swiglu_clamp(h: torch.Tensor, limit: float = SWIGLU_LIMIT, alpha: float = SWIGLU_ALPHA) -> torch.Tensor:
    """gpt-oss SwiGLU with clamp: gate clamped above at `limit`, up to
    [-limit, limit]; out = (up + 1) * gate * sigmoid(alpha * gate). (gpt-oss
    interleaves gate/up columns; here w13 is gate-then-up, as the rest.)"""
    i = h.shape[-1] // 2
    gate = torch.clamp(h[..., :i], max=limit)
    up = torch.clamp(h[..., i:], min=-limit, max=limit)
    return (up + 1.0) * (gate * torch.sigmoid(alpha * gate))


ACTIVATIONS = {"silu": silu_and_mul, "swiglu_clamp": swiglu_clamp}


def get_activation(name: str):
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}") from None
