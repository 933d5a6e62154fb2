"""Seeded checks of the reference numerics for `moe-harness run`.

For every format x scale mode x rounding on the given device: the half-step
error bound, MX idempotence, the SQNR floors torchao's suite uses on
randn(128, 128) bf16, special-value rules, and (on a GPU) bit equality of the
device result with the CPU reference.
"""
from __future__ import annotations

import math

import torch

from harness.formats.bounds import check_qdq_bound
from harness.formats.quant import dequantize, qdq, quantize
from harness.formats.spec import FORMATS, ROUNDINGS


def sqnr_db(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    noise = float(((x - y) ** 2).sum())
    return math.inf if noise == 0 else 10 * math.log10(float((x**2).sum()) / noise)


def _sample(seed: int, block: int, device) -> torch.Tensor:
    """Rows of blocks spanning 2^-60..2^60 with zero, tie and NaN/Inf blocks."""
    g = torch.Generator().manual_seed(seed)
    rows, blocks = 64, 8
    x = torch.randn(rows, blocks, block, generator=g)
    x *= torch.exp2(torch.randint(-60, 61, (rows, blocks, 1), generator=g).float())
    x[0, 0] = 0.0
    x[1, 0] = -0.0
    x[2, 0, 3] = math.nan
    x[3, 1, 5] = math.inf
    return x.reshape(rows, blocks * block).to(device)


def _variants(spec):
    for mode in spec.scale_modes:
        for rounding in ROUNDINGS:
            yield mode, rounding


def iter_checks(seed: int = 0, device="cpu"):
    """The checks one by one, each yielded as soon as it finishes."""
    device = torch.device(device)
    for name, spec in FORMATS.items():
        x = _sample(seed, spec.block_size, device)
        finite_rows = torch.isfinite(x).all(-1)
        gen = torch.Generator().manual_seed(seed + 1)
        randn = torch.randn(128, 128, generator=gen).to(torch.bfloat16).to(device)
        for mode, rounding in _variants(spec):
            gs = spec.gs_numerator / 37.5 if spec.has_global_scale else None
            q = quantize(x, name, mode, rounding, gs)
            worst, _ = check_qdq_bound(x[finite_rows], quantize(x[finite_rows], name, mode, rounding, gs))
            y = dequantize(q)
            details = {"err_vs_bound": worst}
            ok = worst <= 1.0
            if spec.is_mx:
                idem = torch.equal(torch.nan_to_num(qdq(y, name, mode, rounding), nan=7.0), torch.nan_to_num(y, nan=7.0))
                details["idempotent"] = idem
                ok &= idem
            poisoned = torch.isnan(y[2]).any() and torch.isnan(y[3]).any() if spec.is_mx else torch.isnan(y[2]).any()
            details["nan_rule"] = bool(poisoned)
            ok &= bool(poisoned)
            rgs = spec.gs_numerator / float(randn.float().abs().max()) if spec.has_global_scale else None
            s = sqnr_db(randn.float(), qdq(randn, name, mode, rounding, rgs).float())
            details["sqnr_db"] = s
            details["sqnr_floor_db"] = spec.sqnr_floor_db
            ok &= s >= spec.sqnr_floor_db
            if device.type != "cpu":
                ref = quantize(x.cpu(), name, mode, rounding, gs)
                same = torch.equal(ref.codes, q.codes.cpu()) and torch.equal(ref.scales, q.scales.cpu())
                details["device_equals_cpu"] = same
                ok &= same
            yield ({"name": f"{name}/{mode}/{rounding}", "passed": bool(ok), "details": details})


def run_checks(seed: int = 0, device="cpu") -> list[dict]:
    return list(iter_checks(seed=seed, device=device))
