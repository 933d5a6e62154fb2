"""The spec in exact rational arithmetic (fractions.Fraction): what a block
should quantize to, computed without any floating-point step, to judge a
mismatch between an implementation and the reference.

OCP MX v1.0: the shared scale is 2^(floor(log2 amax) - emax) ("floor"); the
other modes are the named alternatives of docs/numerics.md, each defined on the
exact amax: "ceil" 2^(ceil(log2 amax) - emax); "even" floor after rounding
amax half-up to the element's mantissa width; "rceil" the smallest 2^n with
amax <= max_normal * 2^n. The byte is clamped to [0, 254], an all-zero block
gets 0 and a block holding NaN or Inf gets 0xFF. Elements are the exact
quotient x / scale rounded to the nearest element value (ties to the even
code, or away from zero), saturating at max_normal, keeping the sign of x.

NVFP4 has no published spec for the float32 operation order; the convention
(vLLM's, which the reference follows) is the sequence of float32 operations
s = e4m3(min(gs * (amax * fl(1/6)), 448)), r = fl(gs / s), y = fl(x * r),
dequantized as fl(e * fl(s / gs)); each float32 step is modelled here as the
exact rational result rounded once to float32 (round-half-even), so the model
is exact about which rounding each step performs.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import torch

import harness.formats as hf
from harness.formats.spec import E8M0_BIAS, E8M0_MAX_BYTE, E8M0_NAN, ElementSpec

NAN = float("nan")

# (mantissa bits, min normal exponent, max exponent) of each float dtype.
FLOAT_LAYOUT = {torch.float32: (23, -126, 127), torch.bfloat16: (7, -126, 127), torch.float16: (10, -14, 15)}


def floor_log2(a: Fraction) -> int:
    """floor(log2 a) for a > 0, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    elif Fraction(2) ** (e + 1) <= a:
        e += 1
    return e


def ceil_log2(a: Fraction) -> int:
    e = floor_log2(a)
    return e if Fraction(2) ** e == a else e + 1


def round_to_float(v, dtype) -> float:
    """Exact rational (or +-inf / nan float) rounded once to `dtype`, half to even,
    overflow to +-inf; returned as a Python float holding that dtype value."""
    if isinstance(v, float) and not math.isfinite(v):
        return v
    v = Fraction(v)
    if v == 0:
        return 0.0
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    a = abs(v)
    e = max(floor_log2(a), emin)
    ulp = Fraction(2) ** (e - mbits)
    n = round(a / ulp)  # Fraction.__round__: half to even
    r = n * ulp
    if r > Fraction(2) ** emax * (2 - Fraction(2) ** -mbits):
        return math.copysign(math.inf, v)
    return float(r) if v > 0 else -float(r)


def f32(v) -> float:
    return round_to_float(v, torch.float32)


@functools.lru_cache(maxsize=None)
def _element_values(el: ElementSpec) -> tuple:
    """Exact non-negative finite values indexed by magnitude code 0..max_code."""
    return tuple(Fraction(hf.decode_value(el, c)) for c in range(el.max_code + 1))


def is_negative(x: float) -> bool:
    return math.copysign(1.0, x) < 0


def round_element(el: ElementSpec, q, negative: bool, rounding: str) -> int:
    """Element code of the exact value q (sign given separately, so -0 keeps it)."""
    vals = _element_values(el)
    a = abs(Fraction(q))
    if a >= vals[-1]:
        mag = el.max_code
    else:
        hi = next(i for i, v in enumerate(vals) if v > a)
        lo = hi - 1
        dlo, dhi = a - vals[lo], vals[hi] - a
        if dlo != dhi:
            mag = lo if dlo < dhi else hi
        elif rounding == "rne":
            mag = lo if lo % 2 == 0 else hi
        else:  # away from zero
            mag = hi
    return mag | (el.sign_bit if negative else 0)


def element_value(el: ElementSpec, code: int):
    v = hf.decode_value(el, code)
    return Fraction(v) if math.isfinite(v) else v


def mx_shared_exponent(amax, spec, mode: str) -> int:
    """The mode's shared exponent for an exact amax > 0, before E8M0's clamp."""
    el = spec.element
    if mode == "floor":
        return floor_log2(amax) - el.emax
    if mode == "ceil":
        return ceil_log2(amax) - el.emax
    if mode == "even":
        e = floor_log2(amax)
        carry = amax >= Fraction(2) ** e * (2 - Fraction(2) ** -(el.mbits + 1))
        return e + int(carry) - el.emax
    if mode == "rceil":
        return ceil_log2(amax / Fraction(el.max_normal))
    raise ValueError(f"unknown scale_mode {mode!r}")


def mx_scale_byte(amax, spec, mode: str) -> int:
    """Exact E8M0 byte of a block from its exact amax (a Fraction, or nan/inf)."""
    if isinstance(amax, float) and not math.isfinite(amax):
        return E8M0_NAN
    if amax == 0:
        return 0
    return min(max(mx_shared_exponent(amax, spec, mode) + E8M0_BIAS, 0), E8M0_MAX_BYTE)


def _block_amax(xs):
    if any(math.isnan(v) or math.isinf(v) for v in xs):
        return NAN
    return max(abs(Fraction(v)) for v in xs)


def mx_block(xs, spec, mode: str, rounding: str, dtype) -> dict:
    """Exact expected scale byte, codes (None = not constrained: the NaN scale
    carries the block) and qdq values of one MX block of Python floats."""
    byte = mx_scale_byte(_block_amax(xs), spec, mode)
    if byte == E8M0_NAN:
        n = len(xs)
        return {"scales": [byte], "codes": [None] * n, "qdq": [NAN] * n}
    scale = Fraction(2) ** (byte - E8M0_BIAS)
    codes = [round_element(spec.element, Fraction(v) / scale, is_negative(v), rounding) for v in xs]
    return {"scales": [byte], "codes": codes, "qdq": mx_dequantize(codes, [byte], spec, dtype)}


def mx_dequantize(codes, scale_bytes, spec, dtype) -> list:
    byte = scale_bytes[0]
    out = []
    for c in codes:
        e = element_value(spec.element, c)
        if byte == E8M0_NAN or (isinstance(e, float) and math.isnan(e)):
            out.append(NAN)
        elif isinstance(e, float):  # +-inf element (E5M2)
            out.append(e)
        else:
            v = round_to_float(e * Fraction(2) ** (byte - E8M0_BIAS), dtype)
            out.append(-0.0 if v == 0 and c & spec.element.sign_bit else v)
    return out


def _exact(v):
    return Fraction(v) if not isinstance(v, Fraction) else v


def nvfp4_block(xs, spec, rounding: str, gs: float, dtype, real: bool = False) -> dict:
    """The NVFP4 convention's float32 steps, each rounded exactly once; with
    real=True the same formula in real arithmetic (no intermediate rounding:
    s = e4m3(gs * amax / 6), elements x * gs / s), for the second opinion.
    Every constant is the row's (any two-level row: its element max, scale
    element and scale max)."""
    f32 = _exact if real else globals()["f32"]
    el, sc = spec.element, spec.scale
    sign_only = [el.neg_zero_code if is_negative(v) else 0 for v in xs]
    if any(math.isnan(v) for v in xs):
        s_code = sc.nan_code
        return {"scales": [s_code], "codes": sign_only, "qdq": nvfp4_dequantize(sign_only, [s_code], spec, gs, dtype)}
    G = Fraction(gs)
    if any(math.isinf(v) for v in xs):
        s_f = spec.scale_max
    else:
        amax = max(abs(Fraction(v)) for v in xs)
        inv = Fraction(1) / Fraction(spec.elem_max)
        s_f = min(f32(G * Fraction(f32(amax * Fraction(f32(inv))))), Fraction(spec.scale_max))
    s_code = round_element(sc, Fraction(s_f), False, "rne")
    s = element_value(sc, s_code)
    if s == 0:
        codes = sign_only
    else:
        r = Fraction(f32(G / s))
        codes = []
        for v in xs:
            y = math.copysign(math.inf, v) if math.isinf(v) else f32(Fraction(v) * r)
            y = max(min(y, el.max_normal), -el.max_normal)
            codes.append(round_element(el, Fraction(y), is_negative(v), rounding))
    return {"scales": [s_code], "codes": codes, "qdq": nvfp4_dequantize(codes, [s_code], spec, gs, dtype, real)}


def nvfp4_dequantize(codes, scale_codes, spec, gs: float, dtype, real: bool = False) -> list:
    f32 = _exact if real else globals()["f32"]
    s = element_value(spec.scale, scale_codes[0])
    if isinstance(s, float):  # NaN scale
        return [NAN] * len(codes)
    m = Fraction(f32(s / Fraction(gs)))
    out = []
    for c in codes:
        v = round_to_float(f32(element_value(spec.element, c) * m), dtype)
        out.append(-0.0 if v == 0 and c & spec.element.sign_bit else v)
    return out


def expected_block(xs, fmt, mode: str, rounding: str, gs, dtype, real: bool = False) -> dict:
    """{"scales": [byte], "codes": [...], "qdq": [...]} for one block of floats
    (real=True: NVFP4 without the convention's float32 roundings)."""
    spec = hf.get_format(fmt)
    if spec.is_mx:
        return mx_block(xs, spec, mode, rounding, dtype)
    return nvfp4_block(xs, spec, rounding, 1.0 if gs is None else gs, dtype, real)


def expected_dequantize(codes, scale_bytes, fmt, gs, dtype, real: bool = False) -> list:
    spec = hf.get_format(fmt)
    if spec.is_mx:
        return mx_dequantize(codes, scale_bytes, spec, dtype)
    return nvfp4_dequantize(codes, scale_bytes, spec, 1.0 if gs is None else gs, dtype, real)


def same_value(a: float, b: float) -> bool:
    """Bitwise equality of dtype values held as floats; every NaN equals every NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and is_negative(a) == is_negative(b)
