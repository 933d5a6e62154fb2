"""The numerics spec as data: one row per element format.

Everything else (encoders, decoders, lookup tables, strategies, kernels) derives
its constants from these rows; nothing below the table is per-format code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# How a format spends its top exponent field:
#   "none": no Inf/NaN encodings, every code is finite (E2M1, E2M3, E3M2)
#   "fn":   finite + NaN only, NaN = all exponent and mantissa bits set (E4M3FN)
#   "ieee": top exponent field reserved for Inf (mantissa 0) and NaN (E5M2)
SPECIALS = ("none", "fn", "ieee")


@dataclass(frozen=True)
class ElementSpec:
    """A sign + ebits + mbits minifloat; all limits derived from three fields."""

    name: str
    ebits: int
    mbits: int
    specials: str

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.width - 1)

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emax(self) -> int:
        top = (1 << self.ebits) - 1
        return (top - 1 if self.specials == "ieee" else top) - self.bias

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max_normal(self) -> float:
        # E4M3FN loses its largest mantissa at the top exponent to NaN.
        lost = 2 if self.specials == "fn" else 1
        return math.ldexp(2.0 - lost * 2.0 ** -self.mbits, self.emax)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, self.emin - self.mbits)

    @property
    def max_code(self) -> int:
        """Magnitude code of max_normal: exponent field and mantissa of emax."""
        mant = (1 << self.mbits) - (2 if self.specials == "fn" else 1)
        return ((self.emax + self.bias) << self.mbits) | mant

    @property
    def nan_code(self) -> int | None:
        """Positive NaN code, or None where the format has no NaN."""
        if self.specials == "none":
            return None
        return (1 << (self.width - 1)) - 1


E2M1 = ElementSpec("e2m1", 2, 1, "none")
E2M3 = ElementSpec("e2m3", 2, 3, "none")
E3M2 = ElementSpec("e3m2", 3, 2, "none")
E4M3 = ElementSpec("e4m3fn", 4, 3, "fn")
E5M2 = ElementSpec("e5m2", 5, 2, "ieee")


@dataclass(frozen=True)
class FormatSpec:
    """A block-scaled format: element type, block size and block-scale kind."""

    name: str
    element: ElementSpec
    block_size: int
    scale_kind: str  # "e8m0" (OCP MX) or "e4m3" (NVFP4, plus a per-tensor fp32 scale)
    ml_dtypes_name: str  # name of the matching ml_dtypes element type (test oracle)
    has_global_scale: bool = False
    # Copied from the element for the public descriptor (DESIGN.md).
    ebits: int = field(init=False)
    mbits: int = field(init=False)
    bias: int = field(init=False)
    emax: int = field(init=False)
    max_normal: float = field(init=False)
    min_normal: float = field(init=False)
    min_subnormal: float = field(init=False)

    def __post_init__(self):
        for attr in ("ebits", "mbits", "bias", "emax", "max_normal", "min_normal", "min_subnormal"):
            object.__setattr__(self, attr, getattr(self.element, attr))

    @property
    def is_mx(self) -> bool:
        return self.scale_kind == "e8m0"

    @property
    def is_fp4(self) -> bool:
        return self.element.width == 4


_ROWS = (
    FormatSpec("nvfp4", E2M1, 16, "e4m3", "float4_e2m1fn", has_global_scale=True),
    FormatSpec("mxfp4", E2M1, 32, "e8m0", "float4_e2m1fn"),
    FormatSpec("mxfp6_e2m3", E2M3, 32, "e8m0", "float6_e2m3fn"),
    FormatSpec("mxfp6_e3m2", E3M2, 32, "e8m0", "float6_e3m2fn"),
    FormatSpec("mxfp8_e4m3", E4M3, 32, "e8m0", "float8_e4m3fn"),
    FormatSpec("mxfp8_e5m2", E5M2, 32, "e8m0", "float8_e5m2"),
)

FORMATS: dict[str, FormatSpec] = {row.name: row for row in _ROWS}
FORMAT_NAMES: tuple[str, ...] = tuple(FORMATS)
MX_FORMAT_NAMES: tuple[str, ...] = tuple(n for n, f in FORMATS.items() if f.is_mx)

# MX block-scale modes (NUMERICS.md) and element roundings.
SCALE_MODES: tuple[str, ...] = ("floor", "ceil", "even", "rceil")
ROUNDINGS: tuple[str, ...] = ("rne", "away")

# NVFP4 constants of the vLLM encode-side convention.
NVFP4_SCALE_MAX = E4M3.max_normal  # 448
NVFP4_ELEM_MAX = E2M1.max_normal  # 6
NVFP4_GS_NUMERATOR = NVFP4_SCALE_MAX * NVFP4_ELEM_MAX  # 2688 = 448 * 6

# E8M0: value 2^(byte - 127); 255 is NaN; the quantizer clamps to [0, 254].
E8M0_BIAS = 127
E8M0_NAN = 0xFF
E8M0_MAX_BYTE = 254


def get_format(fmt) -> FormatSpec:
    """Look a format up by name (or pass a FormatSpec through); clear error otherwise."""
    if isinstance(fmt, FormatSpec):
        return fmt
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMAT_NAMES)}") from None
