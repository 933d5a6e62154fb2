"""The expert-sorted pair layout of the fused MoE GEMM.

Pairs (token, expert) are sorted by expert (stable) and each expert's rows
padded to BLOCK_M, all on the device with fixed-size buffers (no host sync,
CUDA-graph capturable): rows [num_blocks * BLOCK_M] int64 pair ids (-1 =
padding), block_expert [num_blocks] int32 (-1 = unused block, which does no
loads). BLOCK_M comes from the rows per expert (`block_m_for`).
"""
from __future__ import annotations

from typing import Optional

import torch

from harness.kernels import moe_align

BLOCK_MS = (16, 32, 64, 128)  # BLOCK_M by rows per expert (the last one for anything above)


def block_m_for(num_rows: int, num_experts: int) -> int:
    """BLOCK_M of a GEMM over `num_rows` pair rows: the smallest of BLOCK_MS
    that holds the rows an expert averages, else the largest."""
    per_expert = max(1, num_rows // max(1, num_experts))
    for bm in BLOCK_MS[:-1]:
        if per_expert <= bm:
            return bm
    return BLOCK_MS[-1]


def sort_pairs(ids: torch.Tensor, num_experts: int, block_m: int):
    """Stable sort of pair ids by expert, each expert padded to block_m rows.
    Returns (rows [nb*block_m] int64, block_expert [nb] int32); fixed sizes,
    no host sync (nb = moe_align.num_blocks, an upper bound)."""
    P = ids.shape[0]
    dev = ids.device
    nb = moe_align.num_blocks(P, num_experts, block_m)
    sorted_e, perm = torch.sort(ids, stable=True)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=dev).scatter_add_(0, ids, torch.ones_like(ids))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(P, device=dev, dtype=torch.int64)
    dest = pad_start[sorted_e] + (pos - start[sorted_e])
    rows = torch.full((nb * block_m,), -1, dtype=torch.int64, device=dev)
    rows.scatter_(0, dest, perm)
    bstart = torch.arange(nb, device=dev, dtype=torch.int64) * block_m
    be = torch.searchsorted(pad_end, bstart, right=True)
    block_expert = torch.where(be < num_experts, be, -1).to(torch.int32)
    return rows, block_expert


def pair_layout(ids: torch.Tensor, num_experts: int, num_rows: Optional[int] = None, block_m: Optional[int] = None):
    """(rows, block_expert, block_m) of the GEMM for pair experts `ids` [P].
    The builders give the same tensors bit for bit: up to
    moe_align.MAX_PAIRS pairs one Triton launch (moe_align.py), past it
    three (moe_align.align_pairs_chunked), over more than
    moe_align.MAX_EXPERTS experts the torch ops of sort_pairs. Compute it once per forward and pass it to both
    GEMMs (`moe_gemm(layout=...)`)."""
    bm = block_m or block_m_for(ids.shape[0] if num_rows is None else num_rows, num_experts)
    ids = ids.to(torch.int64)
    if moe_align.applies(ids.shape[0], num_experts):
        rows, block_expert = moe_align.align_pairs(ids, num_experts, bm)
    elif moe_align.applies_chunked(ids.shape[0], num_experts):
        rows, block_expert = moe_align.align_pairs_chunked(ids, num_experts, bm)
    else:
        rows, block_expert = sort_pairs(ids, num_experts, bm)
    return rows, block_expert, bm
