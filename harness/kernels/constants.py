"""Compile-time constants of the Triton kernels, derived from the format table.

Every kernel specialisation is keyed by (format, scale mode, rounding); all
numbers a kernel needs come from `harness.formats.FORMATS` here, so a new
format row needs no kernel change. Values that the kernels compare or build
bit by bit are float32 bit patterns (ints): a kernel never depends on how a
Python float literal is lowered, except for exact float32 constants.
"""
from __future__ import annotations

import functools
import math
import struct

from harness.formats import ROUNDINGS, SCALE_MODES, get_format
from harness.formats.spec import E4M3, SCALE_MODE_CODES, ElementSpec, f32

SPECIALS_CODE = {"none": 0, "fn": 1, "ieee": 2}
# The named codes of harness.formats.spec (SCALE_FLOOR ...), which the kernels
# compare against as constexpr globals.
SCALE_MODE_CODE = SCALE_MODE_CODES
ROUNDING_CODE = {name: i for i, name in enumerate(ROUNDINGS)}  # rne away
F32_MANT_BITS = 23
# gpt-oss's clamped SwiGLU (harness.kernels.fused_act and the GEMM's epilogue, launch_config.act_constexprs)
SWIGLU_LIMIT = 7.0
SWIGLU_ALPHA = 1.702

__all__ = ["F32_MANT_BITS", "ROUNDING_CODE", "SCALE_MODE_CODE", "SPECIALS_CODE", "SWIGLU_ALPHA", "SWIGLU_LIMIT",
           "element_constants", "f32", "f32_bits", "kernel_constants"]


def f32_bits(value: float) -> int:
    """The float32 bit pattern of a float32-exact Python float."""
    if f32(value) != value:
        raise ValueError(f"{value!r} is not exactly representable in float32")
    return struct.unpack("<I", struct.pack("<f", value))[0]


def element_constants(el: ElementSpec, prefix: str = "") -> dict:
    """Encode/decode constants of one element type, as kernel constexprs."""
    if el.specials not in SPECIALS_CODE:
        raise ValueError(f"element {el.name}: {el.specials!r} elements are not implemented in the Triton kernels "
                         "(the torch reference, backend='torch', implements them)")
    _, frexp_e = math.frexp(el.max_normal)
    return {
        f"{prefix}MBITS": el.mbits,
        f"{prefix}WIDTH": el.width,
        f"{prefix}BIAS": el.bias,
        f"{prefix}SIGN_BIT": el.sign_bit,
        f"{prefix}SPECIALS": SPECIALS_CODE[el.specials],
        # 2^emin's float32 exponent field, in place: the smallest quantum
        # exponent an element can use (below it elements are subnormal).
        f"{prefix}EMIN_FIELD": (el.emin + 127) << F32_MANT_BITS,
        f"{prefix}MAXN_BITS": f32_bits(el.max_normal),
        # positive NaN code, or 0 where the format has none (the scale carries NaN)
        f"{prefix}NAN_CODE": el.nan_code if el.nan_code is not None else 0,
        # first Inf/NaN magnitude code of an IEEE-style format (E5M2: 0x7C)
        f"{prefix}INF_CODE": (((1 << el.ebits) - 1) << el.mbits) if el.specials == "ieee" else 0,
        # 2^emin (a normal float32), used by the subnormal decode
        f"{prefix}MIN_NORMAL": el.min_normal,
        # rceil: max_normal = (1 + RCEIL_MANT / 2^23) * 2^RCEIL_EXP
        f"{prefix}RCEIL_EXP": frexp_e - 1,
        f"{prefix}RCEIL_MANT": f32_bits(el.max_normal) & 0x7FFFFF,
    }


@functools.lru_cache(maxsize=None)
def kernel_constants(fmt: str, scale_mode: str = "floor", rounding: str = "rne") -> dict:
    """All constexprs of a (format, scale mode, rounding) specialisation; each
    kernel takes the subset its signature names."""
    spec = get_format(fmt)
    if scale_mode not in SCALE_MODE_CODE:
        raise ValueError(f"unknown scale_mode {scale_mode!r}; expected one of {', '.join(SCALE_MODES)}")
    if rounding not in ROUNDING_CODE:
        raise ValueError(f"unknown rounding {rounding!r}; expected one of {', '.join(ROUNDINGS)}")
    el = spec.element
    consts = {
        "BLOCK": spec.block_size,
        "IS_MX": spec.is_mx,
        "EMAX": el.emax,
        "SCALE_MODE": SCALE_MODE_CODE[scale_mode],
        "ROUND_AWAY": rounding == "away",
        # Quark's "even" scale: add half an element-mantissa ulp to amax's bits
        "EVEN_ADD": 1 << (F32_MANT_BITS - 1 - el.mbits),
    }
    consts.update(element_constants(el))
    # The two-level row's minifloat block scale (E4M3FN for nvfp4); present for
    # every format so that each kernel has one signature (MX specialisations
    # never read them, and get E4M3's as placeholders).
    scale_el = spec.scale if spec.is_two_level else E4M3
    consts.update(element_constants(scale_el, prefix="S_"))
    consts["S_CLAMP_BITS"] = f32_bits(scale_el.max_normal)
    # fl32(1/elem_max): the reference multiplies amax by it (vLLM's operation
    # order; fl32(1/6) for nvfp4)
    consts["INV_ELEM_MAX"] = spec.inv_elem_max
    return consts
