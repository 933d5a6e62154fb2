"""The routing's top-k selection in one launch: the indices of the k largest
keys of each row, ties to the lower index -- the first k of a stable
descending torch.sort, bit for bit (a test holds them equal on ties, +-0,
+-Inf and NaN, which the sort ranks above +Inf).

Each key's float32 bits become an int32 whose order is the float order (-0.0
as +0.0, every NaN the largest), shifted left past the index bits and joined
with (2^IDX_BITS - 1 - index), so all keys of a row are distinct int64s and
the k rounds of "take the row's max, then remove it" give the sort's order.
One program holds ROWS rows of up to MAX_EXPERTS keys in registers. It
replaces the sort (a segmented sort of whole rows: 4.6 us of a 43 us
Qwen3-30B-A3B forward at one token, docs/benchmarks.md) and the copy of the
sliced indices.
"""
from __future__ import annotations

import torch
import triton

from harness.kernels.launch import run_kernel, triton_cdiv
from harness.kernels.loader import kernels

MAX_EXPERTS = 1024
IDX_BITS = 10  # 2^IDX_BITS >= MAX_EXPERTS
ROW_ELEMENTS = 2048  # keys one program holds: ROWS = ROW_ELEMENTS / E_PAD rows (at most MAX_ROWS)
MAX_ROWS = 16
NUM_WARPS = 4


def _kernel(interpret: bool):
    """The top-k kernel (topk_src.py): compiled, or the interpreter's copy."""
    return kernels(interpret, "topk_src")._topk_kernel


def applies(num_experts: int, k: int) -> bool:
    return 1 <= k <= num_experts <= MAX_EXPERTS


def meta(num_experts: int) -> dict:
    e_pad = max(16, triton.next_power_of_2(num_experts))
    return dict(E_PAD=e_pad, ROWS=max(1, min(MAX_ROWS, ROW_ELEMENTS // e_pad)), IDX_BITS=IDX_BITS,
                num_warps=NUM_WARPS)


def topk_ids(keys: torch.Tensor, k: int) -> torch.Tensor:
    """keys [T, E] float32 -> [T, k] int64: torch.sort(keys, dim=-1,
    descending=True, stable=True).indices[:, :k], contiguous. A custom op,
    opaque to torch.compile (as the GEMM)."""
    if keys.dim() != 2 or keys.dtype != torch.float32:
        raise ValueError(f"topk_ids takes float32 keys [T, E], got {keys.dtype} {tuple(keys.shape)}")
    T, E = keys.shape
    if not applies(E, k):
        raise ValueError(f"topk_ids: k={k} of E={E} keys is outside the kernel (1 <= k <= E <= {MAX_EXPERTS})")
    return _topk_ids_op(keys, int(k))


@torch.library.custom_op("moe_harness::topk_ids", mutates_args=())
def _topk_ids_op(keys: torch.Tensor, k: int) -> torch.Tensor:
    T, E = keys.shape
    if keys.stride(1) != 1:
        keys = keys.contiguous()
    ids = torch.empty(T, k, dtype=torch.int64, device=keys.device)
    if T == 0:
        return ids
    interpret = keys.device.type != "cuda"
    kw = meta(E)
    if interpret:
        kw.pop("num_warps")
    run_kernel(_kernel(interpret), (triton_cdiv(T, kw["ROWS"]),), (keys, ids, T, E, keys.stride(0), k), kw, interpret)
    return ids


@_topk_ids_op.register_fake
def _topk_ids_fake(keys, k):
    return keys.new_empty((keys.shape[0], k), dtype=torch.int64)
