"""Input families derived from the format table: every value below comes from
a row's attributes (element limits, block size, scale kind) and the input
dtype's layout, never from a format's name.

Families (one label per block):
    random      per-block power of two anywhere in the dtype's normal range,
                random mantissas
    ties        exact midpoints between adjacent element values, and +-1 ulp
                of the dtype around each, anchored so the block scale is a
                known power of two (MX) or a power-of-two E4M3 scale (NVFP4)
    threshold   amax at, 1 ulp below and 1 ulp above every scale threshold
                of every MX mode (floor/ceil: 2^k; even: the mantissa carry
                point; rceil: max_normal * 2^k) over the whole E8M0 range,
                and for NVFP4 at every E4M3 value and midpoint times 6 / gs
    zeros       +0, -0, mixed signs, and zeros beside one tiny value
    subnormal   the dtype's subnormals (blocks of them, and beside a normal)
    maxima      the dtype's maximum and its neighbours beside small values
    special     NaN, +Inf, -Inf inside otherwise random blocks
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

import harness.formats as hf
from harness.formats.spec import E4M3

from harness.conformance.exact import FLOAT_LAYOUT

FAMILIES = ("random", "ties", "threshold", "zeros", "subnormal", "maxima", "special")
_INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


@dataclass
class FamilyInput:
    """x [rows, blocks_per_row * block] in `dtype`; labels[i] names block i
    (row-major block order)."""

    x: torch.Tensor
    labels: list
    blocks_per_row: int


def _to_dtype(vals, dtype) -> torch.Tensor:
    # float64 -> dtype rounds once; every value built here is representable anyway.
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def _step(v: float, dtype, direction: int) -> float:
    """The dtype's neighbour of v (v already a dtype value, finite, > 0)."""
    t = torch.tensor([v], dtype=torch.float64).to(dtype)
    bits = t.view(_INT_VIEW[dtype]) + direction
    return float(bits.view(dtype).to(torch.float64))


def _around(v: float, dtype) -> list:
    """v and its two dtype neighbours, each as a dtype value (nonpositive dropped)."""
    v = float(_to_dtype([v], dtype))
    if not (v > 0 and math.isfinite(v)):
        return []
    out = [v, _step(v, dtype, -1), _step(v, dtype, +1)]
    return [u for u in out if u > 0 and math.isfinite(u)]


def _in_range(v: float, dtype) -> bool:
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    return math.ldexp(1.0, emin - mbits) <= v <= math.ldexp(2.0 - 2.0 ** -mbits, emax)


def _fill(rng, amax: float, n: int, dtype) -> list:
    """A block whose largest magnitude is exactly amax (at a random position),
    the rest random values of smaller magnitude with random signs."""
    vals = [rng.choice((-1, 1)) * amax * rng.random() for _ in range(n)]
    vals = [float(v) for v in _to_dtype(vals, dtype)]
    vals = [max(min(v, amax), -amax) for v in vals]
    vals[rng.randrange(n)] = rng.choice((-1, 1)) * amax
    return vals


def _element_values(el):
    vals = sorted({hf.decode_value(el, c) for c in range(el.max_code + 1)})
    return vals


def _random_blocks(rng, spec, dtype, count):
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    n = spec.block_size
    for _ in range(count):
        e = rng.randint(emin, emax)
        yield "random", [math.ldexp(rng.randint(-(2 ** mbits), 2 ** mbits), e - mbits) for _ in range(n)]


def _mx_tie_anchors(spec):
    """(anchor magnitude, largest tie usable): the block scale is 2^e in every
    mode for amax = 2^emax * 2^e; with anchor max_normal it is 2^e in all
    modes but ceil (which rounds a non-power-of-two amax up)."""
    el = spec.element
    return [(el.max_normal, el.max_normal), (math.ldexp(1.0, el.emax), math.ldexp(1.0, el.emax))]


def _tie_blocks(rng, spec, dtype, gs):
    el = spec.element
    vals = _element_values(el)
    ties = [(a + b) / 2 for a, b in zip(vals, vals[1:])]
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    n = spec.block_size
    if spec.is_mx:
        anchors = _mx_tie_anchors(spec)
        exps = sorted({emin + 2 + el.mbits, -1, 0, 3, emax - el.emax - 1})
        setups = [(a, limit, math.ldexp(1.0, e)) for a, limit in anchors for e in exps]
    else:
        # NVFP4: amax = 6 * s0 / gs for a power-of-two E4M3 scale s0, so
        # r = gs / s0 is exact and a midpoint stays a midpoint after scaling.
        setups = []
        for k in (E4M3.emin, -2, 0, 3, E4M3.emax):
            s0 = math.ldexp(1.0, k)
            setups.append((el.max_normal, el.max_normal, s0 / gs))
    for anchor, limit, unit in setups:
        if not _in_range(anchor * unit, dtype) or not _in_range(ties[0] * unit / 2, dtype):
            continue
        usable = [t for t in ties if t < limit]
        cands = []
        for t in usable:
            cands.extend(_around(t * unit, dtype))
        for i in range(0, len(cands), n - 1):
            chunk = cands[i:i + n - 1]
            chunk += [rng.choice(cands) for _ in range(n - 1 - len(chunk))]
            block = [rng.choice((-1, 1)) * v for v in chunk] + [anchor * unit]
            rng.shuffle(block)
            yield "ties", block


def _mx_thresholds(spec):
    """Per-mode amax thresholds, as functions of k: where the byte steps."""
    el = spec.element
    return {
        "floor": lambda k: math.ldexp(1.0, k),
        "ceil": lambda k: math.ldexp(1.0, k),
        "even": lambda k: math.ldexp(2.0 - 2.0 ** -(el.mbits + 1), k),
        "rceil": lambda k: el.max_normal * math.ldexp(1.0, k),
    }


def _threshold_blocks(rng, spec, dtype, gs):
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    n = spec.block_size
    amaxes = []
    if spec.is_mx:
        # Every exponent whose threshold lands in the dtype, subnormals included.
        ks = range(emin - mbits - 1, emax + 1)
        for fn in _mx_thresholds(spec).values():
            for k in ks:
                amaxes.extend(_around(fn(k), dtype) if _in_range(fn(k), dtype) else [])
    else:
        svals = _element_values(E4M3)
        points = svals + [(a + b) / 2 for a, b in zip(svals, svals[1:])]
        for s in points:
            a = spec.element.max_normal * s / gs
            if a > 0 and _in_range(a, dtype):
                amaxes.extend(_around(a, dtype))
    for a in sorted(set(amaxes)):
        yield "threshold", _fill(rng, a, n, dtype)


def _zero_blocks(rng, spec, dtype):
    n = spec.block_size
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    tiny = math.ldexp(1.0, emin - mbits)
    yield "zeros", [0.0] * n
    yield "zeros", [-0.0] * n
    yield "zeros", [rng.choice((0.0, -0.0)) for _ in range(n)]
    for v in (tiny, -tiny, 1.0, -1.0):
        block = [rng.choice((0.0, -0.0)) for _ in range(n)]
        block[rng.randrange(n)] = v
        yield "zeros", block


def _subnormal_blocks(rng, spec, dtype):
    n = spec.block_size
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    unit = math.ldexp(1.0, emin - mbits)
    for top in (1, 2, 3, 2 ** mbits - 1, 2 ** (mbits - 1), 2 ** (mbits - 1) + 1):
        yield "subnormal", [rng.choice((-1, 1)) * unit * rng.randint(0, top) for _ in range(n - 1)] + [unit * top]
    for normal in (math.ldexp(1.0, emin), math.ldexp(1.0, emin + 1)):
        block = [rng.choice((-1, 1)) * unit * rng.randint(0, 2 ** mbits - 1) for _ in range(n - 1)] + [normal]
        rng.shuffle(block)
        yield "subnormal", block


def _maxima_blocks(rng, spec, dtype):
    n = spec.block_size
    mbits, emin, emax = FLOAT_LAYOUT[dtype]
    top = math.ldexp(2.0 - 2.0 ** -mbits, emax)
    for a in _around(top, dtype) + _around(math.ldexp(1.0, emax), dtype):
        yield "maxima", _fill(rng, a, n, dtype)
        block = [rng.choice((-1, 1)) * math.ldexp(1.0, rng.randint(emin, 0)) for _ in range(n)]
        block[rng.randrange(n)] = -a
        yield "maxima", block


def _special_blocks(rng, spec, dtype):
    n = spec.block_size
    for specials in ([math.nan], [math.inf], [-math.inf], [math.inf, -math.inf], [math.nan, math.inf]):
        for _ in range(2):
            block = [rng.uniform(-4, 4) for _ in range(n)]
            for s in specials:
                block[rng.randrange(n)] = s
            yield "special", block
    yield "special", [math.nan] * n
    yield "special", [math.inf] * n


def generate(fmt, dtype, seed: int = 0, random_blocks: int = 256, gs: float = 1.0, blocks_per_row: int = 4,
             families=FAMILIES) -> FamilyInput:
    """Every family for one format and input dtype, as one tensor."""
    spec = hf.get_format(fmt)
    if dtype not in FLOAT_LAYOUT:
        raise ValueError(f"input dtype {dtype} is not one of {list(FLOAT_LAYOUT)}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown input families {unknown}; expected {FAMILIES}")
    rng = random.Random(f"{seed}:{spec.name}:{dtype}:{gs}")
    makers = {
        "random": lambda: _random_blocks(rng, spec, dtype, random_blocks),
        "ties": lambda: _tie_blocks(rng, spec, dtype, gs),
        "threshold": lambda: _threshold_blocks(rng, spec, dtype, gs),
        "zeros": lambda: _zero_blocks(rng, spec, dtype),
        "subnormal": lambda: _subnormal_blocks(rng, spec, dtype),
        "maxima": lambda: _maxima_blocks(rng, spec, dtype),
        "special": lambda: _special_blocks(rng, spec, dtype),
    }
    labels, values = [], []
    for fam in families:
        for label, block in makers[fam]():
            labels.append(label)
            values.extend(block)
    while len(labels) % blocks_per_row:
        labels.append("zeros")
        values.extend([0.0] * spec.block_size)
    x = _to_dtype(values, dtype).reshape(-1, blocks_per_row * spec.block_size)
    return FamilyInput(x=x, labels=labels, blocks_per_row=blocks_per_row)
