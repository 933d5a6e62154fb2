"""The split-K rule of the fused MoE GEMM: how many programs share one K loop.

At decode sizes a GEMM whose working programs (at least the distinct
experts, or P / BLOCK_M blocks, times the N tiles) leave the SMs under-filled
gets its K range split, up to MAX_SPLIT_K ways, while each split keeps
MIN_K_PER_SPLIT_BLOCKS BLOCK_Ks. Measured on an H200 (docs/benchmarks.md):
Mixtral's GEMM2 at T=1 (128 programs, 56 BLOCK_Ks) runs 1.95-2.57x faster in
4 splits, at T=16 (512 programs) 1.24x (nvfp4) and 0.98x (mxfp4) in 2; a
short K loop (Qwen3, 3-8 BLOCK_Ks) or a full grid only gets slower split
(1.1-2x): the pipeline prologue and the partial sum cost more than the
programs gain. launch_config.select_launch applies it (a launch override's
SPLIT_K replaces it).
"""
from __future__ import annotations

import torch

from harness.kernels.launch import triton_cdiv

MAX_SPLIT_K = 4
SPLIT_PROGRAMS_PER_SM = 4
MIN_K_PER_SPLIT_BLOCKS = 8
_SM_COUNT: dict = {}


def sm_count(device) -> int:
    """Streaming multiprocessors (compute units) of a GPU, asked once per device."""
    device = torch.device(device)
    if device not in _SM_COUNT:
        _SM_COUNT[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNT[device]


def split_k(P: int, E: int, n_tiles: int, K: int, block_m: int, block_k: int, sms: int) -> int:
    """Splits of K for one launch on a GPU of `sms` SMs, from shapes alone (no
    host sync, so CUDA graphs capture it): the working programs are at least
    max(distinct experts, ceil(P / block_m)) x n_tiles, distinct experts <=
    min(E, P)."""
    working = max(min(E, P), triton_cdiv(P, block_m)) * n_tiles
    splits = 1
    while (splits < MAX_SPLIT_K and working * splits < SPLIT_PROGRAMS_PER_SM * sms
           and K // (2 * splits * block_k) >= MIN_K_PER_SPLIT_BLOCKS):
        splits *= 2
    return splits
