"""Routed scaling applied twice, not at all, or to the shared experts too
(DeepSeek): routed_scaling_factor multiplies the routed (top-k) output exactly
once and never the shared MLP's output. The reference's routed and shared
parts name the alternative the layer's output matches."""
from __future__ import annotations

from harness.testing.checks.problem import extras_of, output_tolerance, reference_trace, run, setup


def check_routed_scaling(problem, t=None, cfg=None, moe=None):
    """The layer's output is routed * 1 + shared (the factor inside the routing
    weights, once) within tolerance; otherwise the message names the
    alternative it matches: scaled twice, not scaled, or the shared MLP
    scaled too."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    f = float(problem.routed_scaling)
    assert f != 1.0, "this check needs routed_scaling != 1"
    out = run(moe, t).detach().cpu().double()
    trace = reference_trace(problem, t, cfg, extras_of(problem, t))
    tol = output_tolerance(trace, problem, cfg, t.hidden.dtype)
    routed = trace.routed
    shared = trace.shared.out if trace.shared is not None else 0 * routed
    cands = {"correct": routed + shared, "the routed scaling applied twice": routed * f + shared,
             "the routed scaling not applied": routed / f + shared}
    if trace.shared is not None:
        cands["the routed scaling applied to the shared experts too"] = routed + shared * f
        cands["the routed scaling applied twice and to the shared experts"] = (routed * f + shared) * f
    ratio = {name: float(((out - c).abs() / tol).max()) if out.numel() else 0.0 for name, c in cands.items()}
    if ratio["correct"] <= 1.0:
        return {"max_err_over_tol": ratio["correct"]}
    best = min(ratio, key=lambda n: ratio[n])
    hint = f": the output is {best} (err/tol {ratio[best]:.3g})" if best != "correct" else ""
    raise AssertionError(f"routed scaling (factor {f}): layer output off the reference by {ratio['correct']:.3g} "
                         f"tolerances{hint} ({problem!r})")
