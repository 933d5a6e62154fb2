"""Public entry points with the reference's signatures plus `backend`.

backend:
    "auto"    Triton on GPU tensors, the torch reference on CPU tensors
    "triton"  Triton: compiled on GPU tensors, the Triton interpreter on CPU
              tensors (slow; for tests on small shapes)
    "torch"   the torch reference (harness.formats)

Arguments are checked here, with the reference's error messages; the
global-scale value check (finite, > 0) reads the tensor on the host, so it is
skipped while tracing under torch.compile or capturing a CUDA graph.
"""
from __future__ import annotations

import math

import torch

import harness.formats as hf
from harness.formats.global_scale import check_global_scale
from harness.formats.quant import check_args

from .ops import dequantize_op, qdq_op, quantize_op

BACKENDS = ("auto", "triton", "torch")


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "torch" if device.type == "cpu" else "triton"
    return backend


def _host_checks_allowed(t: torch.Tensor | None) -> bool:
    if torch.compiler.is_compiling():
        return False
    if t is not None and t.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return False
    return True


def _gs_tensor(global_scale, device) -> torch.Tensor:
    """float32 tensor on `device`; a Python number is filled on the device (no
    host-to-device copy, so it is allowed during graph capture)."""
    if isinstance(global_scale, torch.Tensor):
        gs = global_scale.to(device=device, dtype=torch.float32)
    else:
        gs = torch.full((), float(global_scale), dtype=torch.float32, device=device)
    if _host_checks_allowed(gs):
        check_global_scale(gs)
    return gs


def rows_global_scale(gs: torch.Tensor, lead_shape) -> torch.Tensor:
    """The reference's broadcasting of a global scale over the leading dims,
    as a flat [G] tensor where row r (leading dims flattened) uses
    gs[r // (rows / G)]. Trailing size-1 dims beyond the leading rank are
    dropped, as the reference does; a scale that varies along a non-leading
    pattern is expanded to one value per row."""
    lead = tuple(lead_shape)
    while gs.dim() > len(lead):
        if gs.shape[-1] != 1:
            raise ValueError(f"global_scale of shape {tuple(gs.shape)} does not broadcast to {lead}")
        gs = gs.squeeze(-1)
    if gs.numel() == 1:
        return gs.reshape(1)
    try:
        full = torch.broadcast_to(gs, lead)
    except RuntimeError:
        raise ValueError(f"global_scale of shape {tuple(gs.shape)} does not broadcast to {lead}") from None
    aligned = (1,) * (len(lead) - gs.dim()) + tuple(gs.shape)
    # A prefix of the leading dims, then only size-1 dims: one value per group of rows.
    for k in range(len(lead) + 1):
        if aligned[:k] == lead[:k] and all(d == 1 for d in aligned[k:]):
            return gs.reshape(math.prod(lead[:k])).contiguous()
    return full.reshape(-1).contiguous()


def _op_global_scale(spec, global_scale, x: torch.Tensor):
    if spec.is_mx:
        return None
    gs = _gs_tensor(1.0 if global_scale is None else global_scale, x.device)
    return rows_global_scale(gs, x.shape[:-1])


def qdq(x, fmt, scale_mode: str = "floor", rounding: str = "rne", global_scale=None, backend: str = "auto"):
    """Quantize then dequantize; same dtype and shape as x (== harness.formats.qdq)."""
    spec = check_args(x, fmt, scale_mode, rounding, global_scale)
    be = resolve_backend(backend, x.device)
    return qdq_op(x, _op_global_scale(spec, global_scale, x), spec.name, scale_mode, rounding, be)


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
    gs_t = None if spec.is_mx else _gs_tensor(1.0 if global_scale is None else global_scale, x.device)
    return hf.QuantizedTensor(codes=codes, scales=scales, global_scale=gs_t, fmt=spec.name,
                              scale_mode=scale_mode, rounding=rounding, dtype=x.dtype)


def _check_dtype(dtype):
    if dtype not in hf.FLOAT_DTYPES:
        raise ValueError(f"dequantize dtype {dtype} is not supported; expected float32, bfloat16 or float16")


def _scale_bytes(scales: torch.Tensor) -> torch.Tensor:
    """Scales as uint8 bytes; float8_e4m3fn / float8_e8m0fnu tensors are viewed."""
    if scales.dtype == torch.uint8:
        return scales
    if scales.element_size() == 1 and scales.dtype.is_floating_point:
        return scales.view(torch.uint8)
    raise ValueError(f"scales must be uint8 (or a 1-byte float8 type), got {scales.dtype}")


def dequantize(q: hf.QuantizedTensor, dtype: torch.dtype = torch.float32, backend: str = "auto"):
    """Codes + scales -> values (== harness.formats.dequantize)."""
    spec = q.spec
    _check_dtype(dtype)
    nb = q.codes.shape[-1] // spec.block_size
    if tuple(q.scales.shape) != tuple(q.codes.shape[:-1]) + (nb,):
        raise ValueError(
            f"{spec.name}: scales shape {tuple(q.scales.shape)} does not match codes shape "
            f"{tuple(q.codes.shape)} (expected {tuple(q.codes.shape[:-1]) + (nb,)})"
        )
    be = resolve_backend(backend, q.codes.device)
    gs = None
    if not spec.is_mx:
        gs_in = q.global_scale if q.global_scale is not None else 1.0
        gs = rows_global_scale(_gs_tensor(gs_in, q.codes.device), q.codes.shape[:-1])
    return dequantize_op(q.codes, _scale_bytes(q.scales), gs, spec.name, False, dtype, be)


def dequantize_weights(stored, scales, global_scale, fmt, dtype: torch.dtype = torch.bfloat16,
                       backend: str = "auto"):
    """Stored expert weights -> dense [E, N, K] in `dtype`.

    stored: uint8 [E, N, K] codes, or for fp4 formats [E, N, K/2] packed bytes
    (element 2i in the low nibble); scales: [E, N, K/block] bytes (uint8, or
    float8_e4m3fn / float8_e8m0fnu viewed as bytes); global_scale: nvfp4 only,
    the ENCODE-side per-expert scale [E] (448*6/amax, harness.formats'
    convention; convert ModelOpt's weight_scale_2 with
    hf.global_scale_from_modelopt), or None for 1.0.
    Equals harness.formats.dequantize of the unpacked codes with
    global_scale.reshape(E, 1)."""
    spec = hf.get_format(fmt)
    _check_dtype(dtype)
    if not isinstance(stored, torch.Tensor) or stored.dtype != torch.uint8:
        raise ValueError(f"stored weights must be a uint8 tensor, got {getattr(stored, 'dtype', type(stored))}")
    scales = _scale_bytes(scales)
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
    if spec.is_mx and global_scale is not None:
        raise ValueError(f"{spec.name} has no global scale; pass global_scale=None")
    be = resolve_backend(backend, stored.device)
    gs = None
    if not spec.is_mx:
        gs = _gs_tensor(1.0 if global_scale is None else global_scale, stored.device).reshape(-1)
        if gs.numel() not in (1, stored.shape[0]):
            raise ValueError(f"global_scale must hold 1 or E={stored.shape[0]} values, got shape {tuple(gs.shape)}")
    return dequantize_op(stored, scales, gs, spec.name, packed, dtype, be)
