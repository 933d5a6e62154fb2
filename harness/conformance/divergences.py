"""The registry of known divergences (divergences.yaml) and the named
predicates its entries use. A predicate sees one mismatching block (BlockCase)
and says whether the entry's explanation applies to it."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

import harness.formats as hf
from harness.formats.spec import E4M3

from harness.conformance.protocol import STAGES
from harness.formats.scales import e4m3_encode
from harness.formats import minifloat
from harness.conformance import exact
from harness.util import safe_yaml

REGISTRY_PATH = Path(__file__).with_name("divergences.yaml")
_FIELDS = {"id", "implementation", "versions", "scale_kind", "stages", "modes", "dtypes", "match",
           "explanation", "found"}
_REQUIRED = {"id", "implementation", "versions", "scale_kind", "stages", "match", "explanation"}


@dataclass
class BlockCase:
    """One block where a stage mismatched: inputs (dtype values as floats),
    the cell's settings, and both sides' scale for the block when known."""

    xs: list
    fmt: str
    mode: str
    rounding: str
    dtype: torch.dtype
    gs: Optional[float]
    stage: str
    ref_scale: int
    impl_scale: Optional[int] = None
    # The stage's outputs for this block (codes, scale bytes or values).
    impl_out: Optional[list] = None
    ref_out: Optional[list] = None


# ---- predicates (name -> function(BlockCase) -> bool)

def _amax_f32(case: BlockCase) -> torch.Tensor:
    return torch.tensor(case.xs, dtype=torch.float64).to(case.dtype).to(torch.float32).abs().amax()


def ref_scale_byte_zero(case: BlockCase) -> bool:
    return case.ref_scale == 0 and any(v != 0 for v in case.xs)


def rceil_float32_log2_low(case: BlockCase) -> bool:
    """amax/max_normal in float32, a normal number, lies above a power of two
    whose float32 log2 is nevertheless an integer (so ceil(log2) misses the
    next binade). A subnormal quotient is rceil_quotient_float32_subnormal."""
    spec = hf.get_format(case.fmt)
    d = _amax_f32(case) / spec.max_normal
    l2 = torch.log2(d)
    above_pow2 = bool((d.view(torch.int32) & 0x7FFFFF) != 0)
    normal = bool(d >= 2.0 ** -126)
    return normal and bool(torch.isfinite(d)) and above_pow2 and bool(l2 == torch.floor(l2))


def block_has_inf(case: BlockCase) -> bool:
    return any(math.isinf(v) for v in case.xs) and not any(math.isnan(v) for v in case.xs)


def nvfp4_scale_below_e4m3_min_normal(case: BlockCase) -> bool:
    if not all(math.isfinite(v) for v in case.xs):
        return False
    return hf.decode_value(E4M3, case.ref_scale) < E4M3.min_normal


def nvfp4_amax_divided_by_six(case: BlockCase) -> bool:
    """The block scale's E4M3 code differs between fl(gs * fl(amax * fl(1/6)))
    (the convention) and fl(fl(amax / 6) * gs) (amax divided by 6 first)."""
    if not all(math.isfinite(v) for v in case.xs):
        return False

    amax = _amax_f32(case)
    g = torch.tensor(1.0 if case.gs is None else case.gs, dtype=torch.float32)
    sixth = torch.tensor(1.0 / 6.0, dtype=torch.float32)
    conv = torch.clamp(g * (amax * sixth), max=E4M3.max_normal)
    div = torch.clamp((amax / 6.0) * g, max=E4M3.max_normal)
    return int(e4m3_encode(conv)) != int(e4m3_encode(div))


def nvfp4_ref_scale_zero(case: BlockCase) -> bool:
    """The reference's E4M3 block scale is 0 (gs * amax / 6 below half the
    smallest E4M3 subnormal), finite block."""
    return case.ref_scale == 0 and all(math.isfinite(v) for v in case.xs)


def nvfp4_divides_by_block_scale(case: BlockCase) -> bool:
    """Element codes differ between fl(x * fl(gs / s)) (the convention) and
    fl(x / fl(s / gs)) (dividing by the decode-side block scale), for the
    reference's block scale s."""
    if not all(math.isfinite(v) for v in case.xs):
        return False

    spec = hf.get_format(case.fmt)
    s = torch.tensor(hf.decode_value(E4M3, case.ref_scale), dtype=torch.float32)
    if s == 0:
        return False
    g = torch.tensor(1.0 if case.gs is None else case.gs, dtype=torch.float32)
    x = torch.tensor(case.xs, dtype=torch.float64).to(case.dtype).to(torch.float32)
    mul = torch.clamp(x * (g / s), -spec.max_normal, spec.max_normal)
    div = torch.clamp(x / (s / g), -spec.max_normal, spec.max_normal)
    return not torch.equal(minifloat.encode(spec.element, mul), minifloat.encode(spec.element, div))


def only_signed_zero_differs(case: BlockCase) -> bool:
    """Every differing output is a zero whose sign the implementation dropped."""
    if case.impl_out is None or case.ref_out is None or case.stage == "scales":
        return False
    spec = hf.get_format(case.fmt)
    diffs = [(a, b) for a, b in zip(case.impl_out, case.ref_out) if repr(a) != repr(b)]
    if not diffs:
        return False
    if case.stage == "codes":
        sign = spec.element.sign_bit
        return all(b == sign and a == 0 for a, b in diffs)
    return all(a == 0 and b == 0 and math.copysign(1, b) < 0 < math.copysign(1, a) for a, b in diffs)


def _exact_amax(case: BlockCase):
    from fractions import Fraction

    return max(abs(Fraction(v)) for v in case.xs)


def _finite_nonzero(case: BlockCase) -> bool:
    return all(math.isfinite(v) for v in case.xs) and any(v != 0 for v in case.xs)


def block_has_nan(case: BlockCase) -> bool:
    return any(math.isnan(v) for v in case.xs)


def block_not_finite(case: BlockCase) -> bool:
    return not all(math.isfinite(v) for v in case.xs)


def log2_in_input_dtype_moves_exponent(case: BlockCase) -> bool:
    """floor / ceil of log2(amax) evaluated by torch in the input dtype (its
    result rounded to that dtype) differs from the exact floor / ceil: just
    below a power of two the rounded log2 reaches the integer (floor one
    high), just above it falls back onto it (ceil one low)."""
    if case.mode not in ("floor", "ceil") or not _finite_nonzero(case):
        return False

    amax = _exact_amax(case)
    l2 = torch.log2(torch.tensor(float(amax), dtype=torch.float64).to(case.dtype))
    rounded = torch.floor(l2) if case.mode == "floor" else torch.ceil(l2)
    want = exact.floor_log2(amax) if case.mode == "floor" else exact.ceil_log2(amax)
    return int(rounded) != want


def mx_scale_underflows_input_dtype(case: BlockCase) -> bool:
    """2^(shared exponent) (floor / ceil, unclamped) is below the input
    dtype's smallest subnormal, so a scale computed in that dtype is 0."""
    if case.mode not in ("floor", "ceil") or not _finite_nonzero(case):
        return False

    mbits, emin, _ = exact.FLOAT_LAYOUT[case.dtype]
    e = exact.mx_shared_exponent(_exact_amax(case), hf.get_format(case.fmt), case.mode)
    return e < emin - mbits


def mx_shared_exponent_below_e8m0(case: BlockCase) -> bool:
    """The unclamped shared exponent is below E8M0's smallest, 2^-127 (the
    spec clamps the byte to 0; an implementation keeping 2^e is finer)."""
    if not _finite_nonzero(case):
        return False

    return exact.mx_shared_exponent(_exact_amax(case), hf.get_format(case.fmt), case.mode) < -exact.E8M0_BIAS


def even_rounded_amax_overflows_float32(case: BlockCase) -> bool:
    """Mode even: amax rounded up to the element's mantissa width carries
    out of float32's largest binade (amax >= (2 - 2^-(mbits+1)) * 2^127), so
    a float32 rounding of it is +Inf."""
    if case.mode != "even" or not _finite_nonzero(case):
        return False
    from fractions import Fraction

    mbits = hf.get_format(case.fmt).element.mbits
    return _exact_amax(case) >= Fraction(2) ** 127 * (2 - Fraction(2) ** -(mbits + 1))


def even_rounded_amax_overflows_input_dtype(case: BlockCase) -> bool:
    """Mode even: amax rounded up to the element's mantissa width in the
    input dtype's own bits carries past that dtype's largest binade
    (amax >= (2 - 2^-(mbits+1)) * 2^emax of the dtype): the rounded amax is
    +Inf there."""
    if case.mode != "even" or not _finite_nonzero(case):
        return False
    from fractions import Fraction


    _, _, emax = exact.FLOAT_LAYOUT[case.dtype]
    mbits = hf.get_format(case.fmt).element.mbits
    return _exact_amax(case) >= Fraction(2) ** emax * (2 - Fraction(2) ** -(mbits + 1))


def amax_below_input_dtype_min_normal(case: BlockCase) -> bool:
    """Finite block whose amax is 0 or a subnormal of the input dtype (no
    exponent field to read a scale from)."""
    if not all(math.isfinite(v) for v in case.xs):
        return False

    _, emin, _ = exact.FLOAT_LAYOUT[case.dtype]
    return _exact_amax(case) < 2.0 ** emin


def rceil_quotient_float32_subnormal(case: BlockCase) -> bool:
    """RCEIL computed as ceil(log2(fl(amax / max_normal))) in float32 where
    the quotient is a float32 subnormal: it is rounded to a coarse grid, and
    where it lands on a power of two at or below the exact quotient the byte
    comes out one low."""
    if case.mode != "rceil" or not _finite_nonzero(case):
        return False

    spec = hf.get_format(case.fmt)
    d = _amax_f32(case) / spec.max_normal
    if not (0 < float(d) < 2.0 ** -126):
        return False
    return int(torch.ceil(torch.log2(d))) != exact.mx_shared_exponent(_exact_amax(case), spec, "rceil")


def nvfp4_decode_side_global_scale(case: BlockCase) -> bool:
    """Dequantized with the block scale times a stored decode-side 1/gs,
    fl(s * fl(1/gs)), where the convention divides, fl(s / gs): the two
    multipliers differ by an ulp for this block's scale s."""
    if case.stage != "dequantize":
        return False
    s = hf.decode_value(E4M3, case.ref_scale)
    if not math.isfinite(s) or s == 0:
        return False
    g = torch.tensor(1.0 if case.gs is None else case.gs, dtype=torch.float32)
    st = torch.tensor(s, dtype=torch.float32)
    return bool(st * (1.0 / g) != st / g)


PREDICATES = {f.__name__: f for f in (ref_scale_byte_zero, rceil_float32_log2_low, block_has_inf,
                                      nvfp4_scale_below_e4m3_min_normal, nvfp4_amax_divided_by_six,
                                      nvfp4_ref_scale_zero, nvfp4_divides_by_block_scale,
                                      only_signed_zero_differs, block_has_nan,
                                      log2_in_input_dtype_moves_exponent, mx_scale_underflows_input_dtype,
                                      mx_shared_exponent_below_e8m0, even_rounded_amax_overflows_float32,
                                      rceil_quotient_float32_subnormal, nvfp4_decode_side_global_scale,
                                      even_rounded_amax_overflows_input_dtype, amax_below_input_dtype_min_normal,
                                      block_not_finite)}


# ---- the registry

@dataclass(frozen=True)
class Divergence:
    id: str
    implementation: str
    versions: SpecifierSet
    scale_kind: str
    stages: tuple
    match: str
    explanation: str
    modes: Optional[tuple] = None
    dtypes: Optional[tuple] = None
    found: str = ""

    def applies(self, impl_name: str, impl_version: str, case: BlockCase) -> bool:
        if impl_name != self.implementation or case.stage not in self.stages:
            return False
        try:
            if Version(impl_version) not in self.versions:
                return False
        except InvalidVersion:
            return False
        spec = hf.get_format(case.fmt)
        if spec.scale_kind != self.scale_kind:
            return False
        if self.modes is not None and case.mode not in self.modes:
            return False
        if self.dtypes is not None and str(case.dtype).replace("torch.", "") not in self.dtypes:
            return False
        return PREDICATES[self.match](case)


def _entry(raw, where: str) -> Divergence:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: entry must be a mapping, got {type(raw).__name__}")
    label = f"{where} (id {raw.get('id', '?')!r})"
    missing = _REQUIRED - set(raw)
    if missing:
        raise ValueError(f"{label}: missing field(s) {sorted(missing)}")
    extra = set(raw) - _FIELDS
    if extra:
        raise ValueError(f"{label}: unknown field(s) {sorted(extra)}")
    if raw["match"] not in PREDICATES:
        raise ValueError(f"{label}: match {raw['match']!r} is not a predicate; expected one of {sorted(PREDICATES)}")
    if raw["scale_kind"] not in ("e8m0", "e4m3"):
        raise ValueError(f"{label}: scale_kind {raw['scale_kind']!r} is not e8m0 or e4m3")
    bad = [s for s in raw["stages"] if s not in STAGES]
    if bad:
        raise ValueError(f"{label}: unknown stages {bad}; expected {STAGES}")
    if raw.get("modes") is not None and any(m not in hf.SCALE_MODES for m in raw["modes"]):
        raise ValueError(f"{label}: unknown modes {raw['modes']}; expected {hf.SCALE_MODES}")
    try:
        versions = SpecifierSet(str(raw["versions"]))
    except InvalidSpecifier:
        raise ValueError(f"{label}: versions {raw['versions']!r} is not a PEP 440 specifier") from None
    return Divergence(
        id=str(raw["id"]), implementation=str(raw["implementation"]), versions=versions,
        scale_kind=raw["scale_kind"], stages=tuple(raw["stages"]), match=raw["match"],
        explanation=" ".join(str(raw["explanation"]).split()),
        modes=tuple(raw["modes"]) if raw.get("modes") else None,
        dtypes=tuple(raw["dtypes"]) if raw.get("dtypes") else None, found=str(raw.get("found", "")),
    )


def load_registry(path=None) -> tuple:
    """The registry's entries; ValueError (one line naming the file and the
    entry) for anything else, the file's size, encoding and YAML syntax included."""
    path = Path(path or REGISTRY_PATH)
    data = safe_yaml.load(path, duplicates="error").data
    if not isinstance(data, list):
        raise ValueError(f"{path}: the registry must be a YAML list of entries")
    entries = []
    for i, raw in enumerate(data):
        try:
            entries.append(_entry(raw, f"{path}[{i}]"))
        except (TypeError, KeyError, AttributeError) as e:  # a field of the wrong type
            raise ValueError(f"{path}[{i}]: an entry with fields of the documented types ({type(e).__name__}: {e})") from None
    entries = tuple(entries)
    ids = [e.id for e in entries]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate ids {dup}")
    return entries


@functools.lru_cache(maxsize=None)
def default_registry() -> tuple:
    return load_registry()


def explain(registry, impl_name: str, impl_version: str, case: BlockCase) -> Optional[Divergence]:
    for entry in registry:
        if entry.applies(impl_name, impl_version, case):
            return entry
    return None
