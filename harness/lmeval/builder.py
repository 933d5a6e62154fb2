"""Where the MoE emulation layer comes from.

`emulation_builder()` returns harness.moe.build_emulated_moe. The bf16
baseline has a fallback (`UnquantizedMoE`, softmax -> top-k -> silu_and_mul,
float32 accumulation) used only while harness.moe does not provide
build_emulated_moe, so the adapter can run its bf16 path on its own; every
quantized scheme requires harness.moe.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from .schemes import QUANTIZED_SCHEMES, SCHEMES  # noqa: F401  (re-exported)


def needs_activation_scales(scheme: str) -> bool:
    """Whether the scheme's row needs calibrated encode-side activation global
    scales (two-level activations); "bf16" needs none."""
    if scheme == "bf16":
        return False
    from harness.moe.schemes import get_scheme  # noqa: PLC0415

    return get_scheme(scheme).needs_act_gscale


class UnquantizedMoE(nn.Module):
    def __init__(self, w13, w2, top_k: int, renormalize: bool):
        super().__init__()
        self.w13, self.w2 = w13, w2
        self.top_k, self.renormalize = top_k, renormalize

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(router_logits.float(), dim=-1)
        weights, idx = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        inter = self.w2.shape[2]
        out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
        for e in torch.unique(idx).tolist():
            tok, slot = torch.where(idx == e)
            x = hidden[tok].float()
            gu = x @ self.w13[e].float().T
            act = nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
            out.index_add_(0, tok, (act @ self.w2[e].float().T) * weights[tok, slot, None])
        return out.to(hidden.dtype)


def _fallback(scheme, w13, w2, *, top_k, renormalize=True, scoring="softmax", activation="silu",
              a1_gscale=None, a2_gscale=None, backend="unfused"):
    if scheme != "bf16":
        raise RuntimeError(f"scheme {scheme!r} needs harness.moe.build_emulated_moe, which is not available")
    return UnquantizedMoE(w13, w2, top_k, renormalize)


def emulation_builder():
    try:
        from harness.moe import build_emulated_moe
    except ImportError:
        warnings.warn("harness.moe.build_emulated_moe not available: only the bf16 fallback can run", stacklevel=2)
        return _fallback
    return build_emulated_moe


def builder_source(fn) -> str:
    return "fallback" if fn is _fallback else f"{fn.__module__}.{fn.__name__}"
