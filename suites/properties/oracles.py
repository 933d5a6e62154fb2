"""Independent oracles for the reference quantizer, written from the published
behaviour of three implementations (docs/numerics.md), with different algorithms
from harness.formats: log2 and threshold tables instead of exponent bits.

- microxcaling `_quantize_mx`: shared exponent floor(log2 amax) - emax, then a
  per-element private exponent, round ('even' or 'nearest' = half away from
  zero), clamp to +-max_normal. Computed in float64 here, which removes its two
  documented float32 pitfalls (log2 rounding up below a power of two, and
  floor(x + 0.5) double rounding) and nothing else. Loses signed zero.
- vLLM NVFP4 emulation (Triton order): s = e4m3(clamp(gs*(amax*fl(1/6)), 448)),
  r = fl(gs/s), elements by a threshold table with ties to even codes, dequant
  e2m1 * fl(s/gs). Turns -0.0 into +0.
- torchao `to_mx` is called directly (tests import it).
"""
from __future__ import annotations

import math

import torch

import harness.formats as hf


def microxcaling_qdq(x: torch.Tensor, fmt: str, round_mode: str) -> torch.Tensor:
    spec = hf.FORMATS[fmt]
    B = spec.block_size
    xb = x.to(torch.float64).reshape(-1, B)
    amax = xb.abs().amax(-1, keepdim=True)
    shared = torch.floor(torch.log2(torch.where(amax > 0, amax, torch.ones_like(amax)))) - spec.emax
    shared = torch.clamp(shared, -127, 127)
    a = xb / torch.exp2(shared)
    emin = 1 - spec.bias
    private = torch.floor(torch.log2(torch.where(a != 0, a.abs(), torch.ones_like(a))))
    private = torch.clamp(private, min=emin)
    step = torch.exp2(private - spec.mbits)
    q = a.abs() / step
    if round_mode == "even":
        n = torch.round(q)  # half to even, exact in float64
    else:  # "nearest": half away from zero
        n = torch.floor(q + 0.5)
    v = torch.clamp(n * step, max=spec.max_normal) * torch.sign(a)
    return (v * torch.exp2(shared)).reshape(x.shape).to(torch.float32)


_E2M1_UPPER = [(0.25, True, 0.0), (0.75, False, 0.5), (1.25, True, 1.0), (1.75, False, 1.5),
               (2.5, True, 2.0), (3.5, False, 3.0), (5.0, True, 4.0)]


def _e2m1_by_thresholds(y: torch.Tensor) -> torch.Tensor:
    """|y| -> e2m1 magnitude; a tie goes to the even code (inclusive bounds)."""
    a = y.abs()
    out = torch.full_like(a, 6.0)
    for bound, inclusive, value in reversed(_E2M1_UPPER):
        hit = a <= bound if inclusive else a < bound
        out = torch.where(hit, torch.full_like(a, value), out)
    return out * torch.sign(y)


def vllm_nvfp4_qdq(x: torch.Tensor, gs: float | None) -> torch.Tensor:
    g = torch.tensor(1.0 if gs is None else gs, dtype=torch.float32)
    xb = x.to(torch.float32).reshape(-1, 16)
    amax = xb.abs().amax(-1, keepdim=True)
    sixth = torch.tensor(1 / 6, dtype=torch.float32)
    s = torch.clamp(g * (amax * sixth), max=448.0).to(torch.float8_e4m3fn).to(torch.float32)
    r = g / s
    y = torch.where(s == 0, torch.zeros_like(xb), torch.clamp(xb * r, -6.0, 6.0))
    return (_e2m1_by_thresholds(y) * (s / g)).reshape(x.shape)


def torchao_codes(x: torch.Tensor, fmt: str, mode: str):
    """(scale bytes, element codes one per byte) from torchao's to_mx."""
    from torchao.prototype.mx_formats import constants
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    from harness.conformance.adapters.torchao import element_dtype

    spec = hf.FORMATS[fmt]
    elem = element_dtype(spec, constants)
    if elem is None:
        raise ValueError(f"{fmt}: torchao has no element dtype for {spec.element.name}")
    B = spec.block_size
    scale, data = to_mx(x.to(torch.float32), elem, B, getattr(ScaleCalculationMode, mode.upper()))
    codes = data.view(torch.uint8)
    if spec.is_fp4:
        codes = hf.unpack_fp4(codes)
    return scale.view(torch.uint8).reshape(*x.shape[:-1], x.shape[-1] // B), codes.reshape(x.shape)


def amax_exponent(x: torch.Tensor, block: int) -> torch.Tensor:
    a = x.to(torch.float32).reshape(-1, block).abs().amax(-1)
    return torch.where(a > 0, torch.floor(torch.log2(a.to(torch.float64))), torch.full_like(a, -math.inf, dtype=torch.float64))


def rceil_log2_rounds_down(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Blocks where amax / max_normal (float32) is above a power of two but its
    float32 log2 is an integer: torchao's eager RCEIL lands one binade low."""
    spec = hf.FORMATS[fmt]
    a = x.to(torch.float32).reshape(-1, spec.block_size).abs().amax(-1)
    d = a / spec.max_normal
    l2 = torch.log2(d)
    above_pow2 = (d.view(torch.int32) & 0x7FFFFF) != 0
    return (d > 0) & torch.isfinite(d) & above_pow2 & (l2 == torch.floor(l2))
