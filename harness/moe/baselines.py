"""bf16 MoE forwards that the emulated forward is measured against.

`bf16_loop_forward`: per-expert loop over the routed tokens (cuBLAS per
expert; syncs the host once per expert, so it is not capturable).
`bf16_grouped_forward`: what a user gets from torch today in bf16 -- pairs
sorted by expert on the device, one `torch._grouped_mm` per projection, no
host sync, so the whole forward can be captured in one CUDA graph.
Both compute the same MoE as harness.moe.reference (softmax top-k, silu).
"""
from __future__ import annotations

import torch

from harness.moe.routing import route


def bf16_loop_forward(hidden, router_logits, w13, w2, top_k, renormalize=True):
    T, H = hidden.shape
    inter = w2.shape[2]
    w, ids = route(router_logits, top_k, renormalize=renormalize)
    out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    for e in range(w13.shape[0]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = hidden[tok] @ w13[e].T
        a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        y = a @ w2[e].T
        out.index_add_(0, tok, y.float() * w[tok, slot].unsqueeze(1))
    return out.to(hidden.dtype)


def bf16_grouped_forward(hidden, router_logits, w13, w2, top_k, renormalize=True):
    """w13 [E, 2I, H] and w2 [E, H, I] bf16, contiguous: their transposes are
    the column-major [E, K, N] operands `_grouped_mm` takes without a copy."""
    T, H = hidden.shape
    E, inter = w13.shape[0], w2.shape[2]
    w, ids = route(router_logits, top_k, renormalize=renormalize)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    tok = order // top_k
    # scatter_add, not bincount: bincount sizes its output on the host (a sync)
    counts = torch.zeros(E, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    h = torch._grouped_mm(hidden[tok], w13.transpose(1, 2), offs=offs)
    a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    out.index_add_(0, tok, y.float() * w.reshape(-1)[order].unsqueeze(1))
    return out.to(hidden.dtype)
