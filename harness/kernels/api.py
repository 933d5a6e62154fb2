"""Public entry points with the reference's signatures plus `backend`.

backend:
    "auto"    Triton on GPU tensors, the torch reference on CPU tensors
    "triton"  Triton: compiled on GPU tensors, the Triton interpreter on CPU
              tensors (slow; for tests on small shapes)
    "torch"   the torch reference (harness.formats)

Arguments are checked here by the same functions the reference calls
(harness.formats.validate and storage), so both refuse the same bad input with
the same ValueError. Value checks (code range, global scale finite and > 0)
read only host values (CPU tensors, Python numbers) and never while tracing:
no host sync on GPU paths, so these calls stay capturable in a CUDA graph.
"""
from __future__ import annotations


import torch

import harness.formats as hf
from harness.formats.quant import check_args
from harness.formats.validate import (
    as_global_scale,
    check_code_range,
    check_same_device,
    dequantize_inputs,
)
from harness.formats.validate import global_scale_rows as rows_global_scale  # re-exported

from harness.kernels.ops import dequantize_op, qdq_op, quantize_op

BACKENDS = ("auto", "triton", "torch")


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "torch" if device.type == "cpu" else "triton"
    return backend


def _op_global_scale(spec, global_scale, x: torch.Tensor):
    if spec.is_mx:
        return None
    gs = as_global_scale(1.0 if global_scale is None else global_scale, x.device)
    return rows_global_scale(gs, x.shape[:-1])


def qdq(x, fmt, scale_mode: str = "floor", rounding: str = "rne", global_scale=None, backend: str = "auto",
        bf16_operand: bool = False):
    """Quantize then dequantize; same dtype and shape as x (== harness.formats.qdq).

    bf16_operand: the QDQ written as a bf16 GEMM's operand, in one pass with
    the bits of these ops: MX, harness.formats.qdq(x.float(), ...) rounded
    once to bfloat16 (what the GEMM would round it to); a two-level format
    (one scalar global scale), that QDQ times global_scale, rounded once: the
    codes times their block scales, for a GEMM that applies 1 / global_scale
    after its dot (fused_gemm.moe_gemm's x_scaled)."""
    spec = check_args(x, fmt, scale_mode, rounding, global_scale)
    be = resolve_backend(backend, x.device)
    gs = _op_global_scale(spec, global_scale, x)
    if bf16_operand and not spec.is_mx and (global_scale is None or gs.numel() != 1):
        raise ValueError(f"qdq bf16_operand puts the global scale back: {spec.name} needs one scalar global_scale, "
                         f"got {None if global_scale is None else tuple(torch.as_tensor(global_scale).shape)}")
    return qdq_op(x, gs, spec.name, scale_mode, rounding, be, bool(bf16_operand))


def quantize_packed(x, fmt, scale_mode: str = "floor", rounding: str = "rne", global_scale=None,
                    backend: str = "auto"):
    """(codes, scales) as stored: fp4 packed two per byte (element 2i in the low
    nibble), fp6/fp8 one code per byte; scales uint8 [..., K / block]."""
    spec = check_args(x, fmt, scale_mode, rounding, global_scale)
    be = resolve_backend(backend, x.device)
    return quantize_op(x, _op_global_scale(spec, global_scale, x), spec.name, scale_mode, rounding, True, be)


def quantize(x, fmt, scale_mode: str = "floor", rounding: str = "rne", global_scale=None, backend: str = "auto"):
    """A harness.formats.QuantizedTensor, byte for byte the reference's."""
    spec = check_args(x, fmt, scale_mode, rounding, global_scale)
    be = resolve_backend(backend, x.device)
    codes, scales = quantize_op(x, _op_global_scale(spec, global_scale, x), spec.name, scale_mode, rounding,
                                False, be)
    gs_t = None if spec.is_mx else as_global_scale(1.0 if global_scale is None else global_scale, x.device)
    return hf.QuantizedTensor(codes=codes, scales=scales, global_scale=gs_t, fmt=spec.name,
                              scale_mode=scale_mode, rounding=rounding, dtype=x.dtype)


def _check_dtype(dtype):
    if dtype not in hf.FLOAT_DTYPES:
        raise ValueError(f"dequantize dtype {dtype} is not supported; expected float32, bfloat16 or float16")


def dequantize(q: hf.QuantizedTensor, dtype: torch.dtype = torch.float32, backend: str = "auto"):
    """Codes + scales -> values (== harness.formats.dequantize)."""
    spec = q.spec
    _check_dtype(dtype)
    codes, scales, gs = dequantize_inputs(q.codes, q.scales, q.global_scale, spec)
    be = resolve_backend(backend, codes.device)
    gs = None if gs is None else rows_global_scale(gs, codes.shape[:-1])
    return dequantize_op(codes, scales, gs, spec.name, False, dtype, be)


def dequantize_weights(stored, scales, global_scale, fmt, dtype: torch.dtype = torch.bfloat16,
                       backend: str = "auto"):
    """Stored expert weights -> dense [E, N, K] in `dtype`.

    stored: uint8 [E, N, K] codes (fp8 formats: or their float8 dtype), or for
    fp4 formats [E, N, K/2] packed bytes (element 2i in the low nibble);
    scales: [E, N, K/block] bytes (uint8, or the format's float8 scale dtype,
    viewed bit for bit: harness.formats.storage); global_scale: nvfp4 only,
    the ENCODE-side per-expert scale [E] (448*6/amax, harness.formats'
    convention; convert ModelOpt's weight_scale_2 with
    hf.global_scale_from_modelopt), or None for 1.0.
    Equals harness.formats.dequantize of the unpacked codes with
    global_scale.reshape(E, 1)."""
    spec = hf.get_format(fmt)
    _check_dtype(dtype)
    stored = hf.code_bytes(stored, spec, "stored weights")
    scales = hf.scale_bytes(scales, spec)
    check_same_device(spec, stored=stored, scales=scales)
    if stored.dim() < 2:
        raise ValueError(f"stored weights must be [E, N, K] (or [N, K]), got shape {tuple(stored.shape)}")
    if tuple(scales.shape[:-1]) != tuple(stored.shape[:-1]):
        raise ValueError(f"scales shape {tuple(scales.shape)} does not match stored shape {tuple(stored.shape)}")
    K = scales.shape[-1] * spec.block_size
    if stored.shape[-1] == K:
        packed = False
    elif spec.is_fp4 and stored.shape[-1] * 2 == K:
        packed = True
    else:
        raise ValueError(
            f"{spec.name}: stored last dim {stored.shape[-1]} fits neither K={K} codes"
            + (f" nor K/2={K // 2} packed bytes" if spec.is_fp4 else "")
            + f" for scales of shape {tuple(scales.shape)}"
        )
    spec.check_global_scale_arg(global_scale)
    check_code_range(stored, spec, packed, "stored weights")
    be = resolve_backend(backend, stored.device)
    gs = None
    if not spec.is_mx:
        gs = as_global_scale(1.0 if global_scale is None else global_scale, stored.device).reshape(-1)
        if gs.numel() not in (1, stored.shape[0]):
            raise ValueError(f"global_scale must hold 1 or E={stored.shape[0]} values, got shape {tuple(gs.shape)}")
    return dequantize_op(stored, scales, gs, spec.name, packed, dtype, be)
