"""The top-k sum: each token's k weighted expert outputs added into one row.

Order (contract (3) of harness/kernels/error_bound.py): in float32, from
+0.0, slot 0 first -- the order of vLLM's `moe_sum` kernel -- then rounded
once to the output's dtype. A fixed order, not torch.sum's (which torch
does not specify and its CPU and CUDA kernels choose each their own), so
the fused backend's one-pass kernel
(harness.kernels.fused_act.topk_sum) and this torch expression give the
same bits on every machine.
"""
from __future__ import annotations

import torch


def topk_sum(hw: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """hw [T, k, H] float32 -> [T, H] in out_dtype: the slot-order sum."""
    if hw.dtype != torch.float32 or hw.dim() != 3:
        raise ValueError(f"topk_sum takes [T, k, H] float32, got {hw.dtype} {tuple(hw.shape)}")
    out = torch.zeros(hw.shape[0], hw.shape[2], dtype=torch.float32, device=hw.device)
    for j in range(hw.shape[1]):
        out += hw[:, j]
    return out.to(out_dtype)
