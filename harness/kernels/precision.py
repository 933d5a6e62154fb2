"""Operand precision of the fused MoE GEMM: "ieee" (float32 operands) or
"bf16" (bf16 operands, float32 accumulation), and what "auto" picks.
error_bound.c_prec gives each one's term of the GEMM contract."""
from __future__ import annotations

import torch

PRECISIONS = ("auto", "ieee", "bf16")
RESOLVED_PRECISIONS = ("ieee", "bf16")


def resolve_precision(precision: str, scheme, device=None) -> str:
    """"auto": "ieee" on CPU (interpreter), for fp8 per-tensor activations and
    for unquantized weights; "bf16" on GPU for nvfp4, the MX-activation schemes
    and the weight-only (W4A16 / W8A16) schemes."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown fused precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if device is None or torch.device(device).type != "cuda":
        return "ieee"
    # bf16 where the operands are exact in bf16 (MX x MX) or rescaled exactly
    # (nvfp4), and for weight-only rows: their activations are 16-bit by
    # definition (W4A16), rounded to bf16 where the GEMM reads them, as the
    # production W4A16 kernels (triton_kernels, vLLM) store the intermediate.
    # The rounding is error_bound.c_prec's lossy term.
    return "bf16" if scheme.two_level or scheme.act_block_fmt is not None or scheme.weight_only else "ieee"
