"""Hardware limits a MoE forward is held against, measured on the device of
the run (never taken from a data sheet):

- weight-read limit: bytes of the routed experts' stored weights (element
  codes + block scales, from the format table) over the measured copy
  bandwidth -- no forward can read its weights faster;
- tensor-core limit: the forward's GEMM FLOPs over the measured bf16 GEMM rate.
"""
from __future__ import annotations

import statistics

import torch

import harness.formats as hf


def stored_bytes_per_weight(fmt) -> float:
    """Element bits plus one scale byte per block (the fp32 global scale of a
    two-level format is per expert, negligible)."""
    spec = hf.get_format(fmt)
    return spec.element.width / 8 + 1 / spec.block_size


def expert_weight_count(H: int, inter: int) -> int:
    return 3 * H * inter  # w13 [2I, H] + w2 [H, I]


def routed_experts(router_logits: torch.Tensor, top_k: int) -> int:
    """Distinct experts chosen by at least one token (top-k of the logits, as
    every routing function here picks)."""
    return int(torch.topk(router_logits.float(), top_k, dim=-1).indices.unique().numel())


def gemm_flops(T: int, top_k: int, H: int, inter: int) -> float:
    return 2.0 * T * top_k * expert_weight_count(H, inter)


def median_cuda_ms(fn, iters: int) -> float:
    """Median of `iters` CUDA-event timings of fn() (callers warm up first)."""
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def measure(device: torch.device, iters: int = 20) -> dict:
    """Copy bandwidth (GB/s, read + write of a 2 GiB buffer counted as bytes
    read: a weight read is one direction) and bf16 GEMM rate (TFLOP/s,
    8192^3). CUDA only: on CPU the limits are not meaningful."""
    if device.type != "cuda":
        return {"copy_gbps": None, "bf16_tflops": None, "note": "limits are measured on CUDA devices only"}
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    ms = median_cuda_ms(lambda: dst.copy_(src), iters)
    # A copy moves n bytes in and n out; a read-only stream gets the same
    # per-direction rate on HBM (the bench's kernel figures use the same rule).
    copy_gbps = 2 * n / (ms * 1e-3) / 1e9
    src = dst = None  # free the buffers before the GEMM
    m = 8192
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    a @ b
    ms = median_cuda_ms(lambda: a @ b, iters)
    tflops = 2 * m ** 3 / (ms * 1e-3) / 1e12
    return {"copy_gbps": copy_gbps, "bf16_tflops": tflops}


def read_limit_ms(n_experts: int, H: int, inter: int, fmt, copy_gbps) -> float | None:
    if copy_gbps is None:
        return None
    nbytes = n_experts * expert_weight_count(H, inter) * stored_bytes_per_weight(fmt)
    return nbytes / (copy_gbps * 1e9) * 1e3


def tc_limit_ms(T: int, top_k: int, H: int, inter: int, tflops) -> float | None:
    if tflops is None:
        return None
    return gemm_flops(T, top_k, H, inter) / (tflops * 1e12) * 1e3
