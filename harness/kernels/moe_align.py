"""The expert-sorted pair layout of the fused MoE GEMM in one launch.

`sort_pairs(ids, E, block_m)` (pair_layout.py) builds it with ~17 torch ops:
pairs stably sorted by expert, each expert's rows padded to block_m, rows =
pair id or -1, block_expert = expert of each BLOCK_M block or -1. At decode
sizes those launches cost more than the sort itself, so for up to MAX_PAIRS
pairs one Triton program computes the same two tensors (bit for bit; a test
holds them equal on every input it draws):

- rank of a pair among the pairs of its expert = number of earlier pairs
  with the same expert (what makes the sort stable): a [P, P / 4]
  comparison of the pair's expert with words of four experts, a byte each
  (SWAR: the XOR's zero bytes, their top bits added by one multiply);
- per-expert counts from a histogram of the experts, padded to block_m,
  and each expert's start (the padded counts of all lower experts) from
  their running sum, gathered per pair: dest = start of the pair's expert
  + rank; rows = -1, then pair ids at dest;
  block_expert = -1, then each pair's expert at dest // block_m (every used
  block holds a pair).

Past MAX_PAIRS, `align_pairs_chunked` computes the same tensors in three
launches over chunks of CHUNK pairs (one program each): the chunks' expert
counts (and the -1 fills), then in one program each chunk's start per
expert (the expert's start + its pairs in earlier chunks), then each pair at
its chunk's start + its rank in the chunk (the same comparison). At prefill
that replaces the torch ops' radix sort and, at T=4096, their 49 launches (docs/benchmarks.md).
"""
from __future__ import annotations

import torch
import triton

from harness.kernels.launch import run_kernel
from harness.kernels.loader import kernels

MAX_PAIRS = 128  # [P, P / 4] int32 comparison in one program: 4K elements
MAX_EXPERTS = 256  # an expert is a byte of the rank's words
NUM_WARPS = 4  # 4-16 measured on an H200: 4 is best or within 0.1 us from 8 to 128 pairs (docs/benchmarks.md)
FILL_CHUNK = 64  # rows / blocks written per loop step
CHUNK = MAX_PAIRS  # pairs per program of the chunked layout (the one-program rank's size)
START_ROWS = 64  # chunks per step of the start program (16-128 and 4 or 8 warps measured: docs/benchmarks.md)


def _kernel(interpret: bool):
    """The layout kernel (moe_align_src.py): compiled, or the interpreter's copy."""
    return kernels(interpret, "moe_align_src")._align_kernel


def _chunk_kernels(interpret: bool):
    """The chunked layout's three kernels (count, start, place)."""
    src = kernels(interpret, "moe_align_src")
    return src._chunk_count_kernel, src._chunk_start_kernel, src._chunk_place_kernel


def applies(num_pairs: int, num_experts: int) -> bool:
    return 0 < num_pairs <= MAX_PAIRS and num_experts <= MAX_EXPERTS


def applies_chunked(num_pairs: int, num_experts: int) -> bool:
    return num_pairs > 0 and num_experts <= MAX_EXPERTS


def meta(num_pairs: int, num_experts: int) -> dict:
    return dict(P_PAD=max(16, triton.next_power_of_2(num_pairs)),
                E_PAD=max(16, triton.next_power_of_2(num_experts)), FILL=FILL_CHUNK, num_warps=NUM_WARPS)


def num_blocks(num_pairs: int, num_experts: int, block_m: int) -> int:
    """The most BLOCK_M blocks a layout of P pairs over E experts takes (both
    builders size their buffers by it): with m = min(P, E),
    m + floor((P - m) / block_m). An expert with c >= 1 pairs takes
    ceil(c / block_m) = 1 + floor((c - 1) / block_m) blocks; over the n <= m
    experts that get pairs the floors sum to at most floor((P - n) /
    block_m), and n + floor((P - n) / block_m) grows with n. Reached when m
    experts each hold one pair past a multiple of block_m. So at decode
    (P << E) the GEMM grid has P blocks, not one per expert."""
    m = min(num_pairs, num_experts)
    return m + (num_pairs - m) // block_m


def _outputs(builder: str, fits, limits: str, ids: torch.Tensor, num_experts: int, block_m: int) -> tuple:
    """(nb, rows [nb * block_m] int64, block_expert [nb] int32), uninitialized (the kernels write every
    element), after `fits(P, E)` is checked: a builder's limits, named in its error."""
    if not fits(ids.shape[0], num_experts):
        raise ValueError(f"{builder}: {ids.shape[0]} pairs / {num_experts} experts is outside the {limits}")
    nb = num_blocks(ids.shape[0], num_experts, block_m)
    return (nb, torch.empty(nb * block_m, dtype=torch.int64, device=ids.device),
            torch.empty(nb, dtype=torch.int32, device=ids.device))


def align_pairs(ids: torch.Tensor, num_experts: int, block_m: int):
    """ids [P] int64 (P <= MAX_PAIRS) -> (rows [nb * block_m] int64, block_expert [nb] int32),
    equal to pair_layout.sort_pairs(ids, num_experts, block_m)."""
    P = ids.shape[0]
    nb, rows, block_expert = _outputs("align_pairs", applies,
                                      f"one-program kernel (<= {MAX_PAIRS} pairs, <= {MAX_EXPERTS} experts)",
                                      ids, num_experts, block_m)
    interpret = ids.device.type != "cuda"
    kw = meta(P, num_experts)
    if interpret:
        kw.pop("num_warps")
    run_kernel(_kernel(interpret), (1,), (ids.contiguous(), rows, block_expert, P, num_experts, nb, nb * block_m, block_m),
               kw, interpret)
    return rows, block_expert


def chunk_meta(num_experts: int) -> dict:
    """The count and place launches' constexprs and warps."""
    return dict(CHUNK=CHUNK, E_PAD=max(16, triton.next_power_of_2(num_experts)), num_warps=NUM_WARPS)


def start_meta(num_experts: int) -> dict:
    """The start program's: it reads the counts, not the pairs (no CHUNK)."""
    meta = chunk_meta(num_experts)
    return dict(E_PAD=meta["E_PAD"], CB=START_ROWS, num_warps=meta["num_warps"])


def align_pairs_chunked(ids: torch.Tensor, num_experts: int, block_m: int):
    """ids [P] int64 (any P > 0, E <= MAX_EXPERTS) -> (rows, block_expert),
    equal to pair_layout.sort_pairs(ids, num_experts, block_m)."""
    P = ids.shape[0]
    nb, rows, block_expert = _outputs("align_pairs_chunked", applies_chunked,
                                      f"chunked kernels (> 0 pairs, <= {MAX_EXPERTS} experts)", ids, num_experts,
                                      block_m)
    nc = triton.cdiv(P, CHUNK)
    dev = ids.device
    m = chunk_meta(num_experts)
    counts = torch.empty(nc, m["E_PAD"], dtype=torch.int32, device=dev)
    starts = torch.empty_like(counts)
    interpret = dev.type != "cuda"
    sm = start_meta(num_experts)
    if interpret:
        m.pop("num_warps")
        sm.pop("num_warps")
    count, start, place = _chunk_kernels(interpret)
    ids = ids.contiguous()
    run_kernel(count, (nc,), (ids, counts, rows, block_expert, P, nb, nb * block_m, triton.cdiv(nb * block_m, nc),
                              triton.cdiv(nb, nc)), dict(m, FILL=FILL_CHUNK), interpret)
    run_kernel(start, (1,), (counts, starts, nc, block_m), sm, interpret)
    run_kernel(place, (nc,), (ids, starts, rows, block_expert, P, nb * block_m, block_m), m, interpret)
    return rows, block_expert
