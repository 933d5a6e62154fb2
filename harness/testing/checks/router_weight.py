"""Router weight applied on both the input and the output (Llama-4, vLLM's
apply_router_weight_on_input): the top-1 routing weight multiplies the expert
INPUT (before QDQ #1) and the top-k sum then uses weight 1. Two seams: the
layer's QDQ #1 output must be the quantized weighted input, and its output the
reference's, not the reference's routed part times the weight again."""
from __future__ import annotations

import torch

from harness.moe import reference as ref
from harness.moe import tolerance

from harness.testing.checks.oracle import layer_route
from harness.testing.checks.problem import extras_of, output_tolerance, reference_trace, run, setup


def check_router_weight_on_input(problem, t=None, cfg=None, moe=None):
    if t is None:
        t, _, cfg, moe = setup(problem)
    assert problem.weight_on_input, "this check needs a problem with the router weight on the input"
    moe.experts.trace = seen = {}
    try:
        out = run(moe, t).detach().cpu().double()
    finally:
        moe.experts.trace = None
    trace = reference_trace(problem, t, cfg, extras_of(problem, t))
    scheme = ref.resolve_scheme(problem.scheme)
    # QDQ #1 seam: the layer's a1 is the scheme's QDQ of ITS weighted input x * w32.
    w32, _ = layer_route(problem, t)
    x32 = t.hidden.detach().to(torch.float32)
    a1_layer = seen["a1"].detach().cpu()
    want = ref.qdq_activation((x32 * w32).cpu(), scheme, scale=getattr(cfg, "a1_scale", None),
                              gscale=getattr(cfg, "a1_gscale", None), which="a1")
    if not torch.equal(a1_layer, want):
        unweighted = ref.qdq_activation(x32.cpu(), scheme, scale=getattr(cfg, "a1_scale", None),
                                        gscale=getattr(cfg, "a1_gscale", None), which="a1")
        why = (": it is the UNWEIGHTED input's (the router weight was not applied on the input)"
               if torch.equal(a1_layer, unweighted) else "")
        raise AssertionError(f"the experts' QDQ #1 output is not the quantized weighted input x * w{why}")
    tol = output_tolerance(trace, problem, cfg, t.hidden.dtype)
    err = (out - trace.out).abs()
    if bool((err <= tol).all()):
        return {"max_err_over_tol": float((err / tol).max()) if err.numel() else 0.0}
    shared = trace.shared.out if trace.shared is not None else 0 * trace.routed
    both = trace.routed * trace.weights + shared  # k == 1: the weight again on the output
    wtol = tolerance.routing_weight_tolerance(trace.weights, problem.E, trace.spread) * trace.routed.abs()
    like_both = bool(((out - both).abs() <= 2 * tol + wtol).all())
    raise AssertionError(f"router weight on input: layer output off the reference by "
                         f"{float((err / tol).max()):.3g} tolerances"
                         + ("; it is the weight applied on BOTH the input and the output" if like_both else "")
                         + f" ({problem!r})")
