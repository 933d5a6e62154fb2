"""Who is right about one block: the implementation's and the reference's
outputs against the exact-arithmetic expectation (exact.py)."""
from __future__ import annotations

import math
from fractions import Fraction

import harness.formats as hf

from harness.conformance import exact

IMPL_WRONG = "implementation wrong"
REF_WRONG = "reference wrong"
BOTH_WRONG = "both wrong"
BOTH_ALLOWED = "both allowed by the spec"
VERDICTS = (IMPL_WRONG, REF_WRONG, BOTH_WRONG, BOTH_ALLOWED)


def expected(stage: str, xs, fmt, mode, rounding, gs, dtype, ref_codes=None, ref_scales=None,
             real: bool = False) -> list:
    """Exact expectation of `stage` for one block of Python floats. The
    dequantize stage is judged on the reference's codes and scales (that is
    what both sides were given). real=True: NVFP4's formula in real
    arithmetic instead of the convention's float32 steps."""
    if stage == "dequantize":
        return exact.expected_dequantize(ref_codes, ref_scales, fmt, gs, dtype, real)
    return exact.expected_block(xs, fmt, mode, rounding, gs, dtype, real)[stage]


def _agrees(stage: str, got, want) -> bool:
    if want is None:  # the spec leaves this output open (codes of a NaN-scaled block)
        return True
    if stage in ("scales", "codes"):
        return int(got) == int(want)
    return exact.same_value(float(got), float(want))


def judge(stage: str, impl_out, ref_out, want) -> dict:
    """Verdict plus the first position where a side departs from the spec."""
    impl_bad = [i for i, (g, w) in enumerate(zip(impl_out, want)) if not _agrees(stage, g, w)]
    ref_bad = [i for i, (g, w) in enumerate(zip(ref_out, want)) if not _agrees(stage, g, w)]
    if impl_bad and not ref_bad:
        v = IMPL_WRONG
    elif ref_bad and not impl_bad:
        v = REF_WRONG
    elif impl_bad and ref_bad:
        v = BOTH_WRONG
    else:
        v = BOTH_ALLOWED
    return {"verdict": v, "impl_wrong_at": impl_bad[:8], "ref_wrong_at": ref_bad[:8]}


def explain(xs, fmt, mode, gs) -> dict:
    """The exact quantities a reader needs to check the verdict by hand."""
    spec = hf.get_format(fmt)
    finite = all(math.isfinite(v) for v in xs)
    out = {}
    if finite:
        amax = max(abs(Fraction(v)) for v in xs)
        out["amax"] = str(amax)
        if spec.is_mx:
            byte = exact.mx_scale_byte(amax, spec, mode)
            out["spec_scale_byte"] = byte
            out["spec_scale"] = f"2^{byte - 127}"
        else:
            out["global_scale"] = 1.0 if gs is None else gs
            out["block_scale_real"] = str(Fraction(1.0 if gs is None else gs) * amax / 6)
    else:
        out["nonfinite"] = True
    return out
