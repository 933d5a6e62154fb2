"""The numerics spec as data: one row per element format.

Everything else (encoders, decoders, lookup tables, strategies, kernels) derives
its constants from these rows; nothing below the table is per-format code.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Optional

# How an element spends its codes:
#   "none": minifloat, no Inf/NaN encodings, every code is finite (E2M1, E2M3, E3M2)
#   "fn":   minifloat, finite + NaN only, NaN = all exponent and mantissa bits set (E4M3FN)
#   "ieee": minifloat, top exponent field reserved for Inf (mantissa 0) and NaN (E5M2)
#   "int":  two's complement integer k times the implicit scale 2^-mbits (OCP MXINT8:
#           ebits = 1 integer bit, mbits = 6 fraction bits); no -0, no Inf/NaN
SPECIALS = ("none", "fn", "ieee", "int")

# float32 unit roundoff: |fl(a op b) - a op b| <= U32 * |a op b| (round to nearest)
U32 = 2.0**-24


def f32(value: float) -> float:
    """Round a Python float to float32 (nearest even), returned as a Python float."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


@dataclass(frozen=True)
class ElementSpec:
    """A sign + ebits + mbits minifloat, or (specials "int") a two's complement
    integer of 1 + ebits + mbits bits scaled by 2^-mbits; all limits derive from
    these fields. torchao_dtype names the matching torchao element dtype (an
    attribute of torch or of torchao.prototype.mx_formats.constants), None
    where torchao has none."""

    name: str
    ebits: int
    mbits: int
    specials: str
    torch_dtype: Optional[str] = None  # torch storage dtype of the codes, if torch has one
    torchao_dtype: Optional[str] = None

    def __post_init__(self):
        if self.specials not in SPECIALS:
            raise ValueError(f"element {self.name}: unknown specials {self.specials!r}; expected one of "
                             f"{', '.join(SPECIALS)}")
        if self.ebits < 1 or self.mbits < 0 or self.width > 8:
            raise ValueError(f"element {self.name}: ebits={self.ebits}, mbits={self.mbits} do not fit a code "
                             "of at most 8 bits with at least one exponent (or integer) bit")

    @property
    def is_int(self) -> bool:
        return self.specials == "int"

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.width - 1)

    @property
    def bias(self) -> int:
        """Exponent bias; 0 for an integer element (it has no exponent field)."""
        if self.is_int:
            return 0
        return (1 << (self.ebits - 1)) - 1

    @property
    def emax(self) -> int:
        if self.is_int:  # largest magnitude just below 2^ebits
            return self.ebits - 1
        top = (1 << self.ebits) - 1
        return (top - 1 if self.specials == "ieee" else top) - self.bias

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal; the quantum is 2^(max(e, emin) - mbits).
        An integer element has one quantum, 2^-mbits, so emin = emax there."""
        if self.is_int:
            return self.emax
        return 1 - self.bias

    @property
    def max_normal(self) -> float:
        if self.is_int:
            return math.ldexp(self.max_code, -self.mbits)
        # E4M3FN loses its largest mantissa at the top exponent to NaN.
        lost = 2 if self.specials == "fn" else 1
        return math.ldexp(2.0 - lost * 2.0 ** -self.mbits, self.emax)

    @property
    def min_normal(self) -> float:
        if self.is_int:  # OCP MX v1.0 lists 2^-6 as MXINT8's smallest magnitude
            return self.min_subnormal
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, self.emin - self.mbits)

    @property
    def max_code(self) -> int:
        """Magnitude code of max_normal: exponent field and mantissa of emax
        (integer: the largest positive two's complement value)."""
        if self.is_int:
            return self.sign_bit - 1
        mant = (1 << self.mbits) - (2 if self.specials == "fn" else 1)
        return ((self.emax + self.bias) << self.mbits) | mant

    @property
    def nan_code(self) -> int | None:
        """Positive NaN code, or None where the format has no NaN."""
        if self.specials in ("none", "int"):
            return None
        return (1 << (self.width - 1)) - 1

    @property
    def neg_zero_code(self) -> int:
        """Code of -0 (also of negative values that round to zero): the sign bit
        alone, or 0 for an integer element, which has no -0."""
        return 0 if self.is_int else self.sign_bit

    @property
    def inv_max_normal(self) -> float:
        """fl32(1 / max_normal): two-level rules multiply amax by it (vLLM's order)."""
        return f32(1.0 / self.max_normal)


E2M1 = ElementSpec("e2m1", 2, 1, "none", torchao_dtype="float4_e2m1fn_x2")
E2M3 = ElementSpec("e2m3", 2, 3, "none", torchao_dtype="DTYPE_FP6_E2M3")
E3M2 = ElementSpec("e3m2", 3, 2, "none", torchao_dtype="DTYPE_FP6_E3M2")
E4M3 = ElementSpec("e4m3fn", 4, 3, "fn", torch_dtype="float8_e4m3fn", torchao_dtype="float8_e4m3fn")
E5M2 = ElementSpec("e5m2", 5, 2, "ieee", torch_dtype="float8_e5m2", torchao_dtype="float8_e5m2")
# OCP MX v1.0 MXINT8 element: 8-bit two's complement, implicit scale 2^-6, emax 0.
INT8 = ElementSpec("int8", 1, 6, "int", torch_dtype="int8")


@dataclass(frozen=True)
class PowerOfTwoScaleSpec:
    """An unsigned exponent-only scale (E8M0): value 2^(byte - bias); nan_code
    is NaN; the quantizer clamps bytes to [0, max_code]. ElementSpec-like:
    name, width, bias, max_normal, nan_code, max_code, torch_dtype."""

    name: str
    width: int
    bias: int
    max_code: int
    nan_code: int
    torch_dtype: Optional[str] = None

    @property
    def max_normal(self) -> float:
        return math.ldexp(1.0, self.max_code - self.bias)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, -self.bias)


E8M0 = PowerOfTwoScaleSpec("e8m0", 8, 127, 254, 0xFF, torch_dtype="float8_e8m0fnu")

# Block-scale kinds a row may name, and the rule each implies:
#   "e8m0": OCP MX -- a power-of-two shared exponent per block, from amax by one
#           of the SCALE_MODES; no global scale.
#   "e4m3": two-level (NVFP4) -- an fp32 per-tensor ENCODE-side global scale gs
#           and a minifloat block scale s = rne(clamp(gs * (amax * fl(1/elem_max)),
#           +-scale_max)); elements rne(clamp(x * fl(gs/s), +-elem_max)).
SCALE_SPECS: dict = {"e8m0": E8M0, "e4m3": E4M3}
SCALE_RULES: dict = {"e8m0": "mx", "e4m3": "two_level"}

# MX block-scale modes (docs/numerics.md): named codes shared by the reference and
# the kernels (compile-time constants there; an unknown code is a compile error).
SCALE_FLOOR = 0
SCALE_CEIL = 1
SCALE_EVEN = 2
SCALE_RCEIL = 3
SCALE_MODE_CODES: dict = {"floor": SCALE_FLOOR, "ceil": SCALE_CEIL, "even": SCALE_EVEN, "rceil": SCALE_RCEIL}
SCALE_MODES: tuple[str, ...] = tuple(SCALE_MODE_CODES)
ROUNDINGS: tuple[str, ...] = ("rne", "away")
# The one scale mode of a format without modes (two-level): the default argument.
NO_SCALE_MODE = "floor"


@dataclass(frozen=True)
class FormatSpec:
    """A block-scaled format: element type, block size, block-scale kind (which
    fixes the scale rule) and what the reports and oracles need.

    sqnr_floor_db: the report's SQNR floor on randn(128, 128) bf16 (torchao's
    suite: E4M3 18 dB, E5M2/FP6/FP4 13, NVFP4 8). ml_dtypes_name: the matching
    ml_dtypes element type (test oracle), None where ml_dtypes has none."""

    name: str
    element: ElementSpec
    block_size: int
    scale_kind: str  # key of SCALE_SPECS: "e8m0" (OCP MX) or "e4m3" (two-level, NVFP4-style)
    ml_dtypes_name: Optional[str]
    has_global_scale: bool = False
    sqnr_floor_db: Optional[float] = None
    # Copied from the element for the public descriptor (docs/design.md).
    ebits: int = field(init=False)
    mbits: int = field(init=False)
    bias: int = field(init=False)
    emax: int = field(init=False)
    max_normal: float = field(init=False)
    min_normal: float = field(init=False)
    min_subnormal: float = field(init=False)

    def __post_init__(self):
        where = f"format {self.name!r}"
        if not isinstance(self.element, ElementSpec):
            raise ValueError(f"{where}: element must be an ElementSpec, got {type(self.element).__name__}")
        if self.scale_kind not in SCALE_SPECS:
            raise ValueError(f"{where}: unknown scale kind {self.scale_kind!r}; expected one of "
                             f"{', '.join(SCALE_SPECS)}")
        if SCALE_RULES[self.scale_kind] == "mx" and self.has_global_scale:
            raise ValueError(f"{where}: an E8M0 (MX) block scale with a global scale is not implemented")
        if SCALE_RULES[self.scale_kind] == "two_level" and not self.has_global_scale:
            raise ValueError(f"{where}: an {self.scale_kind.upper()} block scale without a global scale is not "
                             "implemented (two-level rows need has_global_scale=True)")
        if self.is_two_level and self.element.is_int:
            raise ValueError(f"{where}: a two-level row with an integer element is not implemented")
        b = self.block_size
        # Kernel tiles are [blocks, BLOCK] with BLOCK a power of two (triton.arange);
        # packed fp4 needs an even block.
        if not isinstance(b, int) or b < 2 or b & (b - 1):
            raise ValueError(f"{where}: block size {b!r} must be a power of two >= 2")
        if self.sqnr_floor_db is None or not math.isfinite(self.sqnr_floor_db):
            raise ValueError(f"{where}: sqnr_floor_db (the report's SQNR floor in dB on randn(128,128)) "
                             f"must be a finite number, got {self.sqnr_floor_db!r}")
        for attr in ("ebits", "mbits", "bias", "emax", "max_normal", "min_normal", "min_subnormal"):
            object.__setattr__(self, attr, getattr(self.element, attr))

    @property
    def is_mx(self) -> bool:
        """OCP MX rule: power-of-two (E8M0) block scales with a scale mode."""
        return SCALE_RULES[self.scale_kind] == "mx"

    @property
    def is_two_level(self) -> bool:
        """fp32 global scale + minifloat block scale (NVFP4-style)."""
        return SCALE_RULES[self.scale_kind] == "two_level"

    @property
    def is_fp4(self) -> bool:
        return self.element.width == 4

    @property
    def scale(self):
        """The block-scale spec: E8M0 or an ElementSpec (E4M3)."""
        return SCALE_SPECS[self.scale_kind]

    @property
    def elem_max(self) -> float:
        return self.element.max_normal

    @property
    def inv_elem_max(self) -> float:
        """fl32(1 / elem_max), the two-level block-scale multiplier (fl32(1/6) for nvfp4)."""
        return self.element.inv_max_normal

    @property
    def scale_max(self) -> float:
        return self.scale.max_normal

    @property
    def gs_numerator(self) -> float:
        """scale_max * elem_max: the encode-side global scale is this / amax (2688 for nvfp4)."""
        return self.scale_max * self.elem_max

    @property
    def scale_modes(self) -> tuple[str, ...]:
        """Scale modes a caller may pass: every MX mode, or the default alone."""
        return SCALE_MODES if self.is_mx else (NO_SCALE_MODE,)

    def check_scale_mode(self, scale_mode: str) -> None:
        """ValueError unless scale_mode applies to this format (modes are MX only)."""
        if scale_mode not in SCALE_MODES:
            raise ValueError(f"unknown scale_mode {scale_mode!r}; expected one of {', '.join(SCALE_MODES)}")
        if scale_mode not in self.scale_modes:
            raise ValueError(
                f"scale_mode {scale_mode!r} applies to MX formats only; {self.name}'s "
                f"{self.scale_kind.upper()} block scale is always round-to-nearest-even (leave scale_mode "
                "at its default)")

    def check_global_scale_arg(self, global_scale) -> None:
        """ValueError for a global scale given to a row that has none."""
        if global_scale is not None and not self.has_global_scale:
            raise ValueError(f"{self.name} has no global scale; pass global_scale=None")

    def check_options(self, scale_mode: str, global_scale) -> None:
        """Which options apply to this format, in one place: scale modes are
        MX only, a global scale two-level only."""
        self.check_scale_mode(scale_mode)
        self.check_global_scale_arg(global_scale)


# The NVFP4 row: its constants are also public aliases below (NVFP4_*).
NVFP4 = FormatSpec("nvfp4", E2M1, 16, "e4m3", "float4_e2m1fn", has_global_scale=True, sqnr_floor_db=8.0)

_ROWS = (
    NVFP4,
    FormatSpec("mxfp4", E2M1, 32, "e8m0", "float4_e2m1fn", sqnr_floor_db=13.0),
    FormatSpec("mxfp6_e2m3", E2M3, 32, "e8m0", "float6_e2m3fn", sqnr_floor_db=13.0),
    FormatSpec("mxfp6_e3m2", E3M2, 32, "e8m0", "float6_e3m2fn", sqnr_floor_db=13.0),
    FormatSpec("mxfp8_e4m3", E4M3, 32, "e8m0", "float8_e4m3fn", sqnr_floor_db=18.0),
    FormatSpec("mxfp8_e5m2", E5M2, 32, "e8m0", "float8_e5m2", sqnr_floor_db=13.0),
)

FORMATS: dict[str, FormatSpec] = {row.name: row for row in _ROWS}
FORMAT_NAMES: tuple[str, ...] = tuple(FORMATS)
MX_FORMAT_NAMES: tuple[str, ...] = tuple(n for n, f in FORMATS.items() if f.is_mx)

# The NVFP4 row's constants of the vLLM encode-side convention (public aliases).
NVFP4_SCALE_MAX = NVFP4.scale_max  # 448
NVFP4_ELEM_MAX = NVFP4.elem_max  # 6
NVFP4_GS_NUMERATOR = NVFP4.gs_numerator  # 2688 = 448 * 6

# E8M0: value 2^(byte - 127); 255 is NaN; the quantizer clamps to [0, 254].
E8M0_BIAS = E8M0.bias
E8M0_NAN = E8M0.nan_code
E8M0_MAX_BYTE = E8M0.max_code


def get_format(fmt) -> FormatSpec:
    """Look a format up by name (or pass a FormatSpec through); clear error otherwise."""
    if isinstance(fmt, FormatSpec):
        return fmt
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMAT_NAMES)}") from None
