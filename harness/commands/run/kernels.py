"""Seeded checks of the Triton kernels for `moe-harness run`: every format,
scale mode and rounding, kernel == reference bit for bit (NaN == NaN) for QDQ,
quantize (codes and scales) and dequantize. On a GPU the kernels run natively
at a moderate shape; on CPU through the Triton interpreter at a small one."""
from __future__ import annotations

import math

import torch

import harness.formats as hf

from harness.kernels.api import dequantize, qdq, quantize


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        nan = torch.isnan(a) & torch.isnan(b)
        ai = a.view(torch.int16 if a.element_size() == 2 else torch.int32)
        bi = b.view(torch.int16 if b.element_size() == 2 else torch.int32)
        return bool(((ai == bi) | nan).all())
    return torch.equal(a, b)


def _sample(seed: int, rows: int, cols: int, dtype, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols // 32, 32, generator=g)
    x *= torch.exp2(torch.randint(-30, 31, (rows, cols // 32, 1), generator=g).float())
    x = x.reshape(rows, cols)
    x[0, :32] = 0.0
    x[1, 5] = math.nan
    x[2, 40] = math.inf
    return x.to(dtype).to(device)


def iter_checks(seed: int = 0, device="cpu"):
    """The checks one by one, each yielded as soon as it finishes."""
    device = torch.device(device)
    on_gpu = device.type == "cuda"
    rows, cols = (256, 4096) if on_gpu else (4, 64)
    dtypes = (torch.bfloat16, torch.float16, torch.float32) if on_gpu else (torch.bfloat16,)
    for name, spec in hf.FORMATS.items():
        for mode in spec.scale_modes:
            for rounding in hf.ROUNDINGS:
                details, ok = {}, True
                for dtype in dtypes:
                    x = _sample(seed, rows, cols, dtype, device)
                    gs = torch.tensor(spec.gs_numerator / 1000.0, device=device) if spec.has_global_scale else None
                    ref_q = hf.quantize(x, name, mode, rounding, gs)
                    q = quantize(x, name, mode, rounding, gs, backend="triton")
                    same_q = torch.equal(q.codes, ref_q.codes) and torch.equal(q.scales, ref_q.scales)
                    same_qdq = _bits_equal(qdq(x, name, mode, rounding, gs, backend="triton"), hf.qdq(x, name, mode, rounding, gs))
                    same_dq = _bits_equal(dequantize(ref_q, dtype, backend="triton"), hf.dequantize(ref_q, dtype))
                    tag = str(dtype).replace("torch.", "")
                    details[f"{tag}_quantize"] = same_q
                    details[f"{tag}_qdq"] = same_qdq
                    details[f"{tag}_dequantize"] = same_dq
                    ok &= same_q and same_qdq and same_dq
                details["shape"] = [rows, cols]
                yield ({"name": f"triton {name}/{mode}/{rounding}", "passed": bool(ok), "details": details})


def run_checks(seed: int = 0, device="cpu") -> list[dict]:
    return list(iter_checks(seed=seed, device=device))
