"""Shrink a failing block to a minimal one.

The search is deterministic delta debugging over the block's values: it
first tries rescaling the whole block by the power of two that brings its
largest magnitude into [1, 2) (exact, so a readable block when the failure
does not depend on the binade), then repeatedly replaces one element by zero, then one negative element by its
magnitude, keeping each change for which `fails(block)` still holds, until a
whole pass changes nothing. The result is 1-minimal: zeroing any one remaining
element (or dropping any one remaining sign) makes the failure go away. The
block keeps its format's length (16 or 32 elements), so it is at most 32
elements long; its nonzero count is what shrinks.
"""
from __future__ import annotations

import math


def shrink_block(block: list, fails, max_calls: int = 400) -> tuple[list, int]:
    """(minimal block, calls made). `fails(block)` must hold for `block`."""
    cur = list(block)
    calls = 0
    scaled = _rescaled(cur)
    if scaled is not None and scaled != cur:
        calls += 1
        if fails(scaled):
            cur = scaled
    changed = True
    while changed and calls < max_calls:
        changed = False
        # Largest magnitudes last: they usually set the scale the failure needs.
        order = sorted(range(len(cur)), key=lambda i: (not math.isfinite(cur[i]), abs(cur[i]) if math.isfinite(cur[i]) else 0))
        for i in order:
            for repl in _simpler(cur[i]):
                cand = cur[:i] + [repl] + cur[i + 1:]
                calls += 1
                if fails(cand):
                    cur = cand
                    changed = True
                    break
            if calls >= max_calls:
                break
    return cur, calls


def _simpler(v: float) -> list:
    if v == 0 and math.copysign(1.0, v) > 0:
        return []
    out = [0.0]
    if math.copysign(1.0, v) < 0:
        out.append(-v)
    return out


def _rescaled(block: list):
    finite = [abs(v) for v in block if math.isfinite(v) and v != 0]
    if not finite:
        return None
    e = math.frexp(max(finite))[1] - 1  # max in [2^e, 2^(e+1))
    return [math.ldexp(v, -e) if math.isfinite(v) else v for v in block]
