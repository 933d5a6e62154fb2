"""torch.library custom ops `moe_harness::*`, each with a fake (meta) impl.

The ops take already-normalised arguments (harness.kernels.api does the
checks): the global scale is None or a float32 [G] tensor on the data's
device, and row r of the flattened leading dims uses gs[r // (rows / G)].
`backend` is "triton" (compiled on GPU tensors, the Triton interpreter on CPU
tensors) or "torch" (the reference, harness.formats). Being opaque custom ops,
they trace under torch.compile(fullgraph=True), and the Triton path does no
host synchronisation, so it can be captured in a CUDA graph.
"""
from __future__ import annotations

from typing import Optional

import torch

import harness.formats as hf

from harness.kernels import launch

NAMESPACE = "moe_harness"


def _rows_view(t: torch.Tensor, gs: Optional[torch.Tensor]):
    """The reference's view of per-row-group global scales: t as [G, rows/G, K]
    with gs as [G, 1] (or t unchanged and gs a scalar)."""
    if gs is None:
        return t, None
    if gs.numel() <= 1:
        return t, gs.reshape(())
    g = gs.numel()
    return t.reshape(g, -1, t.shape[-1]), gs.reshape(g, 1)


# ---------------------------------------------------------------- qdq


@torch.library.custom_op(f"{NAMESPACE}::qdq", mutates_args=())
def qdq_op(x: torch.Tensor, global_scale: Optional[torch.Tensor], fmt: str, scale_mode: str, rounding: str,
           backend: str, bf16_operand: bool = False) -> torch.Tensor:
    """QDQ in x's dtype; bf16_operand: the float32 QDQ, times the one global
    scale of a two-level format, rounded once to bf16 (api.qdq)."""
    two_level = global_scale is not None and not hf.get_format(fmt).is_mx
    if backend == "triton":
        return launch.qdq(x.contiguous(), global_scale, fmt, scale_mode, rounding,
                          scale_out=bf16_operand and two_level, out_dtype=torch.bfloat16 if bf16_operand else None)
    if bf16_operand:
        g = global_scale.reshape(()) if two_level else None
        y = hf.qdq(x.to(torch.float32), fmt, scale_mode, rounding, g)
        return (y * g if two_level else y).to(torch.bfloat16)
    xv, gs = _rows_view(x, global_scale)
    return hf.qdq(xv, fmt, scale_mode, rounding, gs).reshape(x.shape)


@qdq_op.register_fake
def _qdq_fake(x, global_scale, fmt, scale_mode, rounding, backend, bf16_operand=False):
    return torch.empty_like(x, dtype=torch.bfloat16) if bf16_operand else torch.empty_like(x)


# ---------------------------------------------------------------- quantize


@torch.library.custom_op(f"{NAMESPACE}::quantize", mutates_args=())
def quantize_op(x: torch.Tensor, global_scale: Optional[torch.Tensor], fmt: str, scale_mode: str, rounding: str,
                pack: bool, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    if backend == "triton":
        return launch.quantize(x.contiguous(), global_scale, fmt, scale_mode, rounding, pack)
    xv, gs = _rows_view(x, global_scale)
    q = hf.quantize(xv, fmt, scale_mode, rounding, gs)
    codes = q.codes.reshape(x.shape)
    scales = q.scales.reshape(*x.shape[:-1], -1)
    if pack and hf.get_format(fmt).is_fp4:
        codes = hf.pack_fp4(codes)
    return codes, scales


@quantize_op.register_fake
def _quantize_fake(x, global_scale, fmt, scale_mode, rounding, pack, backend):
    spec = hf.get_format(fmt)
    K = x.shape[-1]
    width = K // 2 if (pack and spec.is_fp4) else K
    codes = x.new_empty((*x.shape[:-1], width), dtype=torch.uint8)
    scales = x.new_empty((*x.shape[:-1], K // spec.block_size), dtype=torch.uint8)
    return codes, scales


# ---------------------------------------------------------------- dequantize


@torch.library.custom_op(f"{NAMESPACE}::dequantize", mutates_args=())
def dequantize_op(codes: torch.Tensor, scales: torch.Tensor, global_scale: Optional[torch.Tensor], fmt: str,
                  packed: bool, dtype: torch.dtype, backend: str) -> torch.Tensor:
    if backend == "triton":
        return launch.dequantize(codes.contiguous(), scales.contiguous(), global_scale, fmt, packed, dtype)
    if packed:
        codes = hf.unpack_fp4(codes)
    cv, gs = _rows_view(codes, global_scale)
    sv = scales.reshape(*cv.shape[:-1], -1)
    q = hf.QuantizedTensor(codes=cv, scales=sv, global_scale=gs, fmt=hf.get_format(fmt).name)
    return hf.dequantize_without_value_checks(q, dtype).reshape(codes.shape)


@dequantize_op.register_fake
def _dequantize_fake(codes, scales, global_scale, fmt, packed, dtype, backend):
    spec = hf.get_format(fmt)
    return codes.new_empty((*codes.shape[:-1], scales.shape[-1] * spec.block_size), dtype=dtype)


OPS = {"qdq": qdq_op, "quantize": quantize_op, "dequantize": dequantize_op}
