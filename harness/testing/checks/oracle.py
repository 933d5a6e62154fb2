"""The layer against the float64 reference (harness.moe.reference) within the
derived tolerance of harness/moe/tolerance.py: routing exact, output within
tolerance; fused and unfused backends each held to it. Catches any numerics
bug that moves the output (wrong scale direction, double QDQ, wrong dequant)."""
from __future__ import annotations

import torch

from harness.moe import reference as ref
from harness.moe import tolerance

from harness.testing.checks.problem import describe_mismatch, make_moe, output_tolerance, reference_trace, run, setup
import harness.moe.routing as routing  # the module the layer calls through
from harness.kernels.error_bound import c_prec
from harness.kernels.precision import resolve_precision


def layer_route(problem, t):
    """The layer's routing of the problem (harness.moe.routing, float32)."""
    return routing.route_arch(t.router_logits, problem.arch, t.e_score_correction_bias)


def check_routing(problem, t=None, trace=None, scale=None):
    """The layer's routing (harness.moe.routing.route_arch, float32) selects the
    same experts as the float64 reference (exact keys; ties -> lowest index,
    groups likewise) and its weights agree to (2E + 2k + 18 + s) u relative (tolerance, term 6)."""
    if t is None:
        t = problem.tensors()
    if trace is None:
        a = problem.arch
        w_ref, ids_ref = ref.reference_route(t.router_logits, a.top_k, scoring=a.scoring, renormalize=a.renormalize,
                                             n_group=a.n_group, topk_group=a.topk_group,
                                             routed_scaling_factor=a.routed_scaling_factor,
                                             e_score_correction_bias=t.e_score_correction_bias)
    else:
        w_ref, ids_ref = trace.weights, trace.ids

    w32, ids = layer_route(problem, t)
    if not torch.equal(ids.cpu().long(), ids_ref):
        rows = torch.nonzero((ids.cpu().long() != ids_ref).any(-1)).flatten()[:2].tolist()
        detail = "; ".join(f"token {r}: logits {t.router_logits[r].cpu().tolist()} layer {ids[r].tolist()} "
                           f"ref {ids_ref[r].tolist()}" for r in rows)
        raise AssertionError(f"routing differs from the reference (top-k of the keys, equal keys -> lowest "
                             f"index) in {int((ids.cpu().long() != ids_ref).any(-1).sum())} tokens: {detail}")
    spread = ref.exp_argument_spread(t.router_logits, ids_ref, problem.arch.scoring)
    dw = tolerance.term_scales(scale)["routing_weights"] * tolerance.routing_weight_tolerance(w_ref, problem.E, spread)
    wbad = ~((w32.cpu().double() - w_ref).abs() <= dw)
    assert not bool(wbad.any()), (
        f"routing weights differ from the reference at {int(wbad.sum())} of {wbad.numel()} (token, slot): e.g. "
        f"{torch.nonzero(wbad)[:3].tolist()}: layer {w32.cpu()[wbad][:3].tolist()} vs ref {w_ref[wbad][:3].tolist()}")
    return {}


def check_matches_reference(problem, t=None, cfg=None, moe=None, out=None, c_prec: float = 0.0, scale=None):
    """Layer output within the derived tolerance of the float64 reference, and
    the layer's routing equal to the reference routing."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    if out is None:
        out = run(moe, t)
    trace = reference_trace(problem, t, cfg)
    T, H = t.hidden.shape
    assert tuple(out.shape) == (T, H), f"output shape {tuple(out.shape)} != {(T, H)}"
    assert out.dtype == t.hidden.dtype, f"output dtype {out.dtype} != hidden dtype {t.hidden.dtype}"
    check_routing(problem, t, trace, scale)
    tol = output_tolerance(trace, problem, cfg, out.dtype, c_prec, scale=scale)
    err = (out.detach().cpu().double() - trace.out).abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        raise AssertionError(describe_mismatch(f"layer vs float64 reference ({problem!r})", out.cpu(), trace.out, tol, bad))
    ratio = float((err / tol).max()) if err.numel() else 0.0
    return {"max_err_over_tol": ratio}


# =========================================================================== fused vs unfused
def fused_c_prec(moe, device) -> float:
    """c_prec of the fused experts' resolved GEMM precision (harness/kernels/error_bound.py
    contract (2)): 0 for "ieee" (always on CPU), 2^-7 for lossy bf16 operands."""
    ex = moe.experts
    return c_prec(ex.scheme, resolve_precision(ex.fused_precision, ex.scheme, device))


def check_fused_matches_unfused(problem, t=None, cfg=None, device="cpu"):
    """Fused vs unfused per the fused kernel's documented contract: NOT bitwise
    (tl.dot sums in another order, even in the CPU interpreter), so BOTH must lie
    within the derived reference tolerance (the fused one widened by its c_prec),
    hence |fused - unfused| <= tol_fused + tol_unfused; the routing, the QDQ
    calls and the top-k sum are shared. If they happen to be bitwise equal the
    result says so."""
    if t is None:
        t, _, cfg, _ = setup(problem)
    mu, mf = make_moe(problem, cfg, "unfused"), make_moe(problem, cfg, "fused")
    a, b = run(mu, t), run(mf, t)
    c = fused_c_prec(mf, a.device)
    check_matches_reference(problem, t, cfg, mu, out=a)
    check_matches_reference(problem, t, cfg, mf, out=b, c_prec=c)
    return {"bitwise": bool(torch.equal(a, b)), "c_prec": c}
