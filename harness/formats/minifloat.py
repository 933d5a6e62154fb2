"""Element encode/decode for every ElementSpec (minifloats and two's
complement integers), by exact integer arithmetic.

Encoding never goes through float log2 or `floor(x + 0.5)` (both round in
float32, see docs/numerics.md pitfalls): the exponent comes from the fp32 exponent
bits, the significand is scaled by an exact power of two, and the tie is
decided on the exact fractional part.
"""
from __future__ import annotations

import functools
import math

import torch

from harness.formats.spec import ElementSpec


def decode_value(spec: ElementSpec, code: int) -> float:
    """Value of one element code (Python float); the table-building primitive."""
    if spec.is_int:
        k = code - (1 << spec.width) if code & spec.sign_bit else code
        return math.ldexp(k, -spec.mbits)
    sign = -1.0 if code & spec.sign_bit else 1.0
    mag = code & (spec.sign_bit - 1)
    exp_field, mant = mag >> spec.mbits, mag & ((1 << spec.mbits) - 1)
    top = (1 << spec.ebits) - 1
    if spec.specials == "fn" and mag == (1 << (spec.width - 1)) - 1:
        return math.nan
    if spec.specials == "ieee" and exp_field == top:
        return sign * math.inf if mant == 0 else math.nan
    if exp_field == 0:
        return sign * math.ldexp(mant, spec.emin - spec.mbits)
    return sign * math.ldexp((1 << spec.mbits) + mant, exp_field - spec.bias - spec.mbits)


@functools.lru_cache(maxsize=None)
def _cpu_lut(spec: ElementSpec) -> torch.Tensor:
    return torch.tensor([decode_value(spec, c) for c in range(1 << spec.width)], dtype=torch.float32)


_LUTS: dict = {}


def decode_lut(spec: ElementSpec, device=None) -> torch.Tensor:
    """float32 table indexed by code, cached per device (so no host->device copy
    happens on a hot path after the first call, e.g. during CUDA graph capture)."""
    device = torch.device(device if device is not None else "cpu")
    key = (spec, device.type, device.index)
    lut = _LUTS.get(key)
    if lut is None:
        lut = _cpu_lut(spec).to(device)
        _LUTS[key] = lut
    return lut


def decode(spec: ElementSpec, codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes -> float32 values. Only the low `width` bits are read, as
    the kernels' bit decoders do: where a wider code was not refused (device
    tensors on hot paths, see validate.py) both give the same value, and a
    table lookup never indexes out of bounds on a device."""
    if spec.width < 8:
        codes = codes & ((1 << spec.width) - 1)
    return decode_lut(spec, codes.device)[codes.long()]


def round_integer(q: torch.Tensor, rounding: str) -> torch.Tensor:
    """Round non-negative float32 q to an integer exactly: the fraction q - floor(q)
    is exact in float32, so the tie test is exact (no q + 0.5 double rounding)."""
    whole = torch.floor(q)
    frac = q - whole
    if rounding == "rne":
        odd = torch.remainder(whole, 2.0) == 1.0
        up = (frac > 0.5) | ((frac == 0.5) & odd)
    elif rounding == "away":
        up = frac >= 0.5
    else:
        raise ValueError(f"unknown rounding {rounding!r}; expected 'rne' or 'away'")
    return whole + up.to(whole.dtype)


def encode(spec: ElementSpec, v: torch.Tensor, rounding: str = "rne") -> torch.Tensor:
    """float32 values (already divided by the block scale) -> uint8 codes.

    Magnitudes at or above max_normal (Inf included) saturate to max_normal with
    the sign kept; NaN gives the format's NaN code, or code 0 where the format
    has none (the block's NaN scale carries the NaN). Negative values that round
    to zero, and -0.0, keep the sign bit (minifloats). An integer element has
    one quantum (emin == emax, so the magnitude code is the rounded multiple)
    and stores -mag in two's complement; it has no -0.
    """
    v = v.to(torch.float32)
    a = v.abs()
    exp = ((a.view(torch.int32) >> 23) & 0xFF) - 127  # floor(log2 a) for normal a
    exp = torch.clamp(exp, min=spec.emin, max=spec.emax)
    # a * 2^(mbits - exp) is exact: a power-of-two scaling within float32 range.
    q = torch.ldexp(a, (spec.mbits - exp).to(torch.float32))
    n = round_integer(q, rounding).to(torch.int32)
    mag = ((exp - spec.emin) << spec.mbits) + n
    # max_normal is itself a code, so only inputs at or past it can exceed max_code.
    mag = torch.where(a >= spec.max_normal, spec.max_code, mag)
    negative = v.view(torch.int32) < 0
    if spec.is_int:
        code = torch.where(negative, (-mag) & ((1 << spec.width) - 1), mag)
    else:
        code = mag | (negative.to(torch.int32) * spec.sign_bit)
    nan = torch.isnan(v)
    nan_code = spec.nan_code if spec.nan_code is not None else 0
    code = torch.where(nan, nan_code, code)
    return code.to(torch.uint8)
