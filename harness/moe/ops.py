"""Element-wise quantization ops the MoE layer uses, routed by `resolve_backend`:
"triton" runs harness.kernels, "torch" the harness.formats reference math;
"auto" is "triton" on CUDA/ROCm devices and "torch" elsewhere (a fixed rule,
not a fallback: a CPU machine without the triton package runs every layer
with "auto" or "torch"; "triton" without it raises, naming the package).

The "torch" path here is the reference math of harness.formats (same
functions, same operation order, bit-identical) minus the checks that read
values (hf.dequantize_without_value_checks: weights are checked at load, the
activations' codes come from the quantizer), so it can run inside CUDA-graph
capture and
torch.compile(fullgraph=True). Lookup tables must have been put on the device
beforehand (see `prepare_device`), never during forward.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

import harness.formats as hf
from harness.formats import minifloat as _minifloat
from harness.formats import quant as _quant
from harness.formats import scales as _scales
from harness.formats.validate import global_scale_blocks

BACKENDS = ("auto", "triton", "torch")


@functools.lru_cache(maxsize=None)
def kernels_module():
    """harness.kernels, imported on first use (the torch path never needs it).
    An import error propagates: a broken install is never a silent switch to
    the reference path."""
    import harness.kernels as hk

    return hk


def resolve_backend(backend: str, device) -> str:
    """"triton" or "torch": the path `backend` takes for tensors on `device`."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown op backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "auto":
        # On CPU the Triton interpreter is far too slow for whole layers.
        return "triton" if torch.device(device).type == "cuda" else "torch"
    return backend


def _use_kernels(backend: str, device: torch.device) -> bool:
    if resolve_backend(backend, device) == "torch":
        return False
    kernels_module()
    return True


def prepare_device(device) -> None:
    """Move every decode table to `device` now (conversion time), so no
    host->device copy happens during forward or CUDA graph capture."""
    device = torch.device(device)
    for spec in hf.FORMATS.values():
        _minifloat.decode_lut(spec.element, device)
        if spec.is_two_level:
            _minifloat.decode_lut(spec.scale, device)
    _minifloat.decode_lut(hf.E4M3, device)  # per-tensor fp8 activations
    _scales._tables(device)


def _torch_qdq(x: torch.Tensor, fmt: str, scale_mode: str, rounding: str, global_scale) -> torch.Tensor:
    spec = hf.get_format(fmt)
    if x.shape[-1] % spec.block_size:
        raise ValueError(f"{fmt}: last dimension {x.shape[-1]} is not a multiple of block {spec.block_size}")
    xb = _quant._blocks(x, spec.block_size)
    if spec.is_mx:
        codes, byte = _quant._quantize_mx(xb, spec, scale_mode, rounding)
        gs_t = None
    else:
        gs_t = hf.as_global_scale(global_scale, x.device, read_values=False)
        gsb = global_scale_blocks(gs_t, x.shape[:-1], x.device)
        codes, byte = _quant._quantize_two_level(xb, spec, gsb, rounding)
    q = hf.QuantizedTensor(codes.reshape(x.shape), byte, gs_t, spec.name, scale_mode, rounding, x.dtype)
    return hf.dequantize_without_value_checks(q, x.dtype)


def qdq(x: torch.Tensor, fmt: str, *, scale_mode: str = "floor", rounding: str = "rne",
        global_scale=None, backend: str = "auto", bf16_operand: bool = False) -> torch.Tensor:
    """Quantize-dequantize x [..., K] (same dtype/shape); bf16_operand: the
    QDQ written as a bf16 GEMM's operand (harness.kernels.api.qdq)."""
    if _use_kernels(backend, x.device):
        return kernels_module().qdq(x, fmt, scale_mode=scale_mode, rounding=rounding,
                                    global_scale=global_scale, backend="triton" if backend == "triton" else "auto",
                                    bf16_operand=bf16_operand)
    two_level = hf.get_format(fmt).has_global_scale
    if two_level and global_scale is None:
        raise ValueError(f"{fmt} QDQ needs a global scale")
    if not bf16_operand:
        return _torch_qdq(x, fmt, scale_mode, rounding, global_scale)
    if not two_level:
        return _torch_qdq(x.to(torch.float32), fmt, scale_mode, rounding, None).to(torch.bfloat16)
    if torch.as_tensor(global_scale).numel() != 1:
        raise ValueError(f"qdq bf16_operand puts the global scale back: {fmt} needs one scalar global scale, got "
                         f"{tuple(torch.as_tensor(global_scale).shape)}")
    g = hf.as_global_scale(global_scale, x.device, read_values=False).reshape(())
    return (_torch_qdq(x.to(torch.float32), fmt, scale_mode, rounding, g) * g).to(torch.bfloat16)


def e4m3_qdq_per_tensor(x: torch.Tensor, scale: Optional[torch.Tensor]) -> torch.Tensor:
    """Per-tensor FP8 E4M3FN QDQ with a DECODE-side scale s (x ~= q * s):
    q = e4m3_rne(clamp(x / s, -448, 448)), out = q * s (float32 math).
    scale None -> dynamic s = amax(|x|) / 448 (1.0 for an all-zero x),
    computed on the device (no host sync)."""
    xf = x.to(torch.float32)
    if scale is None:
        amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=x.device)
        # A device-tensor divisor: torch's CUDA kernels turn division by a Python
        # scalar into a multiply by its float32 reciprocal, fl(amax * fl(1/448)),
        # 1 ulp off fl(amax / 448) for some amax (on an H200 the a1 codes of
        # w_mxfp4_a_fp8 then differ from the reference in 17,608 of 1.97M tokens).
        s = torch.where(amax > 0, amax / torch.full_like(amax, hf.E4M3.max_normal), torch.ones_like(amax))
    else:
        s = scale.to(device=x.device, dtype=torch.float32).reshape(())
    y = torch.clamp(xf / s, -hf.E4M3.max_normal, hf.E4M3.max_normal)
    q = _scales.e4m3_decode(_scales.e4m3_encode(y))
    return (q * s).to(x.dtype)


def dequantize_expert_weights(q: hf.QuantizedTensor, gscale: Optional[torch.Tensor], *,
                              backend: str = "auto") -> torch.Tensor:
    """[E, N, K] codes + block scales (+ per-expert encode-side global scale
    [E] for two-level rows) -> float32 weights, bit-identical to hf.dequantize:
    MX: decode(code) * 2^(byte-127); two-level: decode(code) * fl32(s / gs[e])."""
    spec = hf.get_format(q.fmt)
    if _use_kernels(backend, q.codes.device):
        return kernels_module().dequantize_weights(q.codes, q.scales, gscale if spec.has_global_scale else None,
                                                   spec.name, torch.float32)
    gs = None
    if spec.has_global_scale:
        if gscale is None:
            raise ValueError(f"{spec.name} weights need their per-expert global scale")
        gs = gscale.to(torch.float32).reshape(-1, 1)
    qq = hf.QuantizedTensor(q.codes, q.scales, gs, spec.name, q.scale_mode, q.rounding, torch.float32)
    return hf.dequantize_without_value_checks(qq, torch.float32)
