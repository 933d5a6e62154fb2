"""Public hypothesis strategies, derived from the format table.

Every strategy reads its limits from `harness.formats.FORMATS`, so a new format
row is covered without touching this file. Tensors are built from small
integer draws (a mantissa per element, an exponent per block) so hypothesis
shrinks a failure towards one block of small, readable values.

    import harness.strategies as hs
    @given(hs.block_tensors("mxfp4"))          # or block_tensors() for any format
    def test_x(case): case.x, case.fmt ...

Block kinds (one drawn per block):
    random     mantissas times 2^e, e anywhere the dtype can hold (2^-126..2^127 in fp32)
    ties       exact midpoints between adjacent element codes (k + 0.5 code steps)
               times a power-of-two block scale, anchored by +-max_normal
    zero       an all-zero block (signed zeros included)
    subnormal  float32 subnormals (fp32/bf16 only)
    max        values at max_normal, just past it, and far past it, times 2^e
    special    NaN / +-Inf mixed into a random block (only with allow_nan_inf)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from harness.formats import FORMAT_NAMES, FORMATS, ROUNDINGS, SCALE_MODES, decode_value
from harness.formats.spec import FormatSpec

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BLOCK_KINDS = ("random", "ties", "zero", "subnormal", "max")

# Binade range each input dtype can hold, normal numbers (min exp, max exp).
_DTYPE_EXP = {torch.float32: (-126, 127), torch.bfloat16: (-126, 127), torch.float16: (-14, 15)}
_DTYPE_MANT = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}


@dataclass
class BlockCase:
    """A drawn input: x [rows, blocks*block] of `dtype`, plus the kinds drawn."""

    x: torch.Tensor
    fmt: str
    kinds: tuple

    def __repr__(self):  # what a failing example prints: small and complete
        torch.set_printoptions(precision=10, threshold=10_000)
        return f"BlockCase(fmt={self.fmt!r}, dtype={self.x.dtype}, shape={tuple(self.x.shape)}, kinds={self.kinds},\n  x={self.x!r})"


def formats(names=FORMAT_NAMES):
    return st.sampled_from(tuple(names))


def mx_formats():
    return formats(tuple(n for n in FORMAT_NAMES if FORMATS[n].is_mx))


def scale_modes():
    return st.sampled_from(SCALE_MODES)


def roundings():
    return st.sampled_from(ROUNDINGS)


def dtypes(allowed=DTYPES):
    return st.sampled_from(tuple(allowed))


def global_scales(allow_none: bool = True):
    """Encode-side NVFP4 global scales: 2688/amax for amax over a wide range,
    exact powers of two, and None (meaning 1.0)."""
    from_amax = st.floats(min_value=2.0**-20, max_value=2.0**20, allow_nan=False, allow_infinity=False).map(
        lambda a: float(torch.tensor(2688.0, dtype=torch.float32) / torch.tensor(a, dtype=torch.float32))
    )
    pow2 = st.integers(-20, 20).map(lambda e: math.ldexp(1.0, e))
    choices = [from_amax, pow2]
    if allow_none:
        choices.append(st.none())
    return st.one_of(*choices)


def _tie_values(spec: FormatSpec):
    """Midpoints between adjacent non-negative finite element values."""
    el = spec.element
    vals = sorted({decode_value(el, c) for c in range(el.sign_bit) if math.isfinite(decode_value(el, c))})
    return [(a + b) / 2 for a, b in zip(vals, vals[1:])]


@st.composite
def _block(draw, spec: FormatSpec, dtype, allow_nan_inf: bool):
    kinds = BLOCK_KINDS + (("special",) if allow_nan_inf else ())
    if dtype == torch.float16:
        kinds = tuple(k for k in kinds if k != "subnormal")
    kind = draw(st.sampled_from(kinds))
    n = spec.block_size
    lo, hi = _DTYPE_EXP[dtype]
    mant_bits = _DTYPE_MANT[dtype]
    if kind == "zero":
        signs = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        return kind, [-0.0 if s else 0.0 for s in signs]
    if kind == "subnormal":
        ints = draw(st.lists(st.integers(-(2**23 - 1), 2**23 - 1), min_size=n, max_size=n))
        return kind, [math.ldexp(i, -149) for i in ints]
    if kind == "ties":
        ties = _tie_values(spec)
        # Keep the block exponent where anchor and ties stay normal in the dtype.
        e = draw(st.integers(max(lo + 12, -100), min(hi - spec.emax - 1, 100)))
        picks = draw(st.lists(st.tuples(st.sampled_from(ties), st.booleans()), min_size=n - 1, max_size=n - 1))
        anchor = draw(st.booleans())
        vals = [(-t if neg else t) for t, neg in picks] + [(-1.0 if anchor else 1.0) * spec.max_normal]
        order = draw(st.permutations(range(n)))
        return kind, [math.ldexp(vals[i], e) for i in order]
    if kind == "max":
        e = draw(st.integers(max(lo, -100), min(hi - spec.emax - 2, 100)))
        m = spec.max_normal
        candidates = [m, -m, m * (1 + 2.0**-mant_bits), m * 1.5, -m * 1.25, m / 2, m * (1 - 2.0**-mant_bits)]
        vals = draw(st.lists(st.sampled_from(candidates), min_size=n, max_size=n))
        return kind, [math.ldexp(v, e) for v in vals]
    # random / special
    e = draw(st.integers(lo, hi))
    ints = draw(st.lists(st.integers(-(2**mant_bits), 2**mant_bits), min_size=n, max_size=n))
    vals = [math.ldexp(i, e - mant_bits) for i in ints]
    if kind == "special":
        where = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
        for w in where:
            vals[w] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return kind, vals


@st.composite
def block_tensors(draw, fmt=None, dtypes=DTYPES, allow_nan_inf: bool = False, max_rows: int = 3, max_blocks: int = 3):
    """A float tensor [rows, k*block] in one of `dtypes`, blocks of mixed kinds."""
    name = fmt if fmt is not None else draw(formats())
    spec = FORMATS[name]
    dtype = draw(st.sampled_from(tuple(dtypes)))
    rows = draw(st.integers(1, max_rows))
    nblocks = draw(st.integers(1, max_blocks))
    kinds, values = [], []
    for _ in range(rows * nblocks):
        kind, vals = draw(_block(spec, dtype, allow_nan_inf))
        kinds.append(kind)
        values.extend(vals)
    x = torch.tensor(values, dtype=torch.float64).to(torch.float32).to(dtype)
    return BlockCase(x=x.reshape(rows, nblocks * spec.block_size), fmt=name, kinds=tuple(kinds))


@st.composite
def finite_float32(draw, lo_exp: int = -149, hi_exp: int = 127):
    """Any finite float32 by its bit pattern (uniform over encodings)."""
    bits = draw(st.integers(0, 0x7F7FFFFF))
    sign = draw(st.booleans())
    v = torch.tensor([bits | (0x80000000 if sign else 0)], dtype=torch.int64).to(torch.int32).view(torch.float32)
    return float(v)


# --- MoE problems (moe_problems) are appended below by the MoE suites. ---
