"""The minimal failing problem: deterministic greedy shrinking of a problem's
sizes (tokens, experts, selected experts, hidden and intermediate rows),
regenerating the problem from its seed at each step and keeping a smaller
one whenever the SAME check still fails on it, until no candidate fails or
the budget is spent. The result is 1-minimal over problems.shrink_candidates:
each remaining one-step reduction passes (or errors)."""
from __future__ import annotations

from harness.conformance.moe import problems as pb


def shrink(problem: pb.Problem, fails, multiple: int, budget: int = 40) -> tuple:
    """(smallest failing problem found, calls made). `fails(problem)` -> bool
    must hold for `problem`."""
    cur, calls = problem, 0
    changed = True
    while changed and calls < budget:
        changed = False
        for cand in pb.shrink_candidates(cur, multiple):
            calls += 1
            if fails(cand):
                cur, changed = cand, True
                break
            if calls >= budget:
                break
    return cur, calls
