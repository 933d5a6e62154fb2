"""Block-scale codecs: E8M0 (OCP MX) with its four scale modes, and the
minifloat block scale of two-level rows (E4M3FN for NVFP4)."""
from __future__ import annotations

import functools
import math

import torch

from harness.formats import minifloat
from harness.formats.spec import (
    E4M3,
    E8M0_BIAS,
    E8M0_MAX_BYTE,
    E8M0_NAN,
    SCALE_CEIL,
    SCALE_EVEN,
    SCALE_FLOOR,
    SCALE_MODE_CODES,
    SCALE_MODES,
    SCALE_RCEIL,
    FormatSpec,
)


@functools.lru_cache(maxsize=None)
def _e8m0_tables():
    # 2^(b-127) and its inverse 2^(127-b) for b in 0..254 are all exact float32
    # values (2^-127 is a float32 subnormal); byte 255 is NaN.
    scale = [math.ldexp(1.0, b - E8M0_BIAS) for b in range(255)] + [math.nan]
    inv = [math.ldexp(1.0, E8M0_BIAS - b) for b in range(255)] + [math.nan]
    return torch.tensor(scale, dtype=torch.float32), torch.tensor(inv, dtype=torch.float32)


_DEVICE_TABLES: dict = {}


def _tables(device):
    device = torch.device(device)
    key = (device.type, device.index)
    if key not in _DEVICE_TABLES:
        _DEVICE_TABLES[key] = tuple(t.to(device) for t in _e8m0_tables())
    return _DEVICE_TABLES[key]


def e8m0_to_float(byte: torch.Tensor) -> torch.Tensor:
    """E8M0 byte -> float32 scale 2^(byte-127) (NaN for 0xFF)."""
    return _tables(byte.device)[0][byte.long()]


def e8m0_inverse(byte: torch.Tensor) -> torch.Tensor:
    """E8M0 byte -> float32 2^(127-byte), the exact reciprocal of the scale."""
    return _tables(byte.device)[1][byte.long()]


def _fp32_exponent(a: torch.Tensor) -> torch.Tensor:
    """floor(log2 a) from the float32 exponent field; -127 for zero/subnormals
    (their shared exponent clamps to byte 0 in every mode anyway)."""
    return ((a.view(torch.int32) >> 23) & 0xFF) - 127


def mx_shared_exponent(amax: torch.Tensor, fmt: FormatSpec, scale_mode: str) -> torch.Tensor:
    """Unclamped shared exponent (int32) of each block from its float32 amax >= 0."""
    el = fmt.element
    amax = amax.to(torch.float32)
    code = SCALE_MODE_CODES.get(scale_mode)
    if code == SCALE_FLOOR:
        return _fp32_exponent(amax) - el.emax
    if code == SCALE_CEIL:
        bits = amax.view(torch.int32)
        inexact = (bits & 0x7FFFFF) != 0
        return _fp32_exponent(amax) + inexact.to(torch.int32) - el.emax
    if code == SCALE_EVEN:
        # Round amax to the element's mantissa width (half up on the bits),
        # keep sign + exponent: Quark's "even".
        bits = amax.view(torch.int32) + (1 << (22 - el.mbits))
        return ((bits >> 23) & 0xFF) - 127 - el.emax
    if code == SCALE_RCEIL:
        # Smallest n with amax <= max_normal * 2^n. Both sides share a binade
        # after shifting by n0 = E(amax) - E(max_normal), so the test is a
        # comparison of the 23-bit fractions: exact, integer-only (no float
        # log2, no ldexp, whose device implementations round).
        frac_a = amax.view(torch.int32) & 0x7FFFFF
        m_bits = int(torch.tensor(el.max_normal, dtype=torch.float32).view(torch.int32))
        e_m, frac_m = ((m_bits >> 23) & 0xFF) - 127, m_bits & 0x7FFFFF
        return _fp32_exponent(amax) - e_m + (frac_a > frac_m).to(torch.int32)
    raise ValueError(f"unknown scale_mode {scale_mode!r}; expected one of {', '.join(SCALE_MODES)}")


def mx_scale_byte(amax: torch.Tensor, fmt: FormatSpec, scale_mode: str) -> torch.Tensor:
    """E8M0 byte per block: clamped to [0, 254]; all-zero block -> 0; a block whose
    amax is NaN or Inf -> 0xFF (the whole block dequantizes to NaN)."""
    shared = mx_shared_exponent(amax, fmt, scale_mode)
    byte = torch.clamp(shared + E8M0_BIAS, 0, E8M0_MAX_BYTE)
    byte = torch.where(amax == 0, 0, byte)
    byte = torch.where(torch.isfinite(amax), byte, E8M0_NAN)
    return byte.to(torch.uint8)


def block_scale_encode(fmt: FormatSpec, v: torch.Tensor) -> torch.Tensor:
    """float32 -> a two-level row's block-scale bits, round-to-nearest-even, saturating."""
    return minifloat.encode(fmt.scale, v, "rne")


def block_scale_decode(fmt: FormatSpec, bits: torch.Tensor) -> torch.Tensor:
    """A two-level row's block-scale bits -> float32 values."""
    return minifloat.decode(fmt.scale, bits)


def e4m3_encode(v: torch.Tensor) -> torch.Tensor:
    """float32 -> float8_e4m3fn bits, round-to-nearest-even, saturating."""
    return minifloat.encode(E4M3, v, "rne")


def e4m3_decode(bits: torch.Tensor) -> torch.Tensor:
    return minifloat.decode(E4M3, bits)
