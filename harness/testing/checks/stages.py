"""Stage by stage: each float32 step of the layer within ITS term of the derived
tolerance (harness/moe/tolerance.py), on the layer's own inputs to that step
(the experts' trace seam: a1, h1, a2_in, a2, h2; the routing; the output):

  routing weights  |w32 - w|                 <= "routing_weights"
  weighted input   |x w32 - fl32(x fl32(w))| <= "input_weight"   (router weight on input)
  QDQ #1 / #2      a1 = QDQ(a1 input), a2 = QDQ(a2_in), bit for bit (the spec's quantizer)
  GEMM1            |h1 - (a1 @ W13[e].T + b13[e])| <= "gemm1" + "bias_rounding"
  activation       |a2_in - act(h1)|         <= "activation"
  GEMM2            |h2 - (a2 @ W2[e].T + b2[e])|   <= "gemm2" + "bias_rounding"
  combine          |out - (sum_j w32_j h2_j + shared)| <= "sum" + "output_cast"

The end-to-end check (oracle.check_matches_reference) composes these terms
through the data flow; this one shows each term bounding a real, nonzero
error of its own step, so the witness tests can drop one term at a time
(scale={term: 0}) and see its stage fail, also for the terms whose error the
composed bound's other terms happen to cover."""
from __future__ import annotations

import torch

from harness.moe import reference as ref
from harness.moe import tolerance as tl

from harness.testing.checks.oracle import check_routing, layer_route
from harness.testing.checks.problem import extras_of, reference_trace, run, setup

F32, F64 = torch.float32, torch.float64


def _per_expert(x, e_of, w):
    out = torch.zeros(x.shape[0], w.shape[1], dtype=F64)
    for e in range(w.shape[0]):
        rows = (e_of == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            out[rows] = x[rows] @ w[e].T
    return out


def _within(stage, got, want, bound):
    err = (got - want).abs()
    bad = ~(err <= bound + 2.0**-140)
    if bool(bad.any()):
        i = tuple(torch.nonzero(bad)[0].tolist())
        raise AssertionError(f"{stage}: {int(bad.sum())} of {bad.numel()} elements outside the stage's bound, e.g. "
                             f"at {list(i)}: layer {float(got[i])}, exact {float(want[i])}, bound {float(bound[i])}")


def _qdq_exact(stage, got, qin, cfg, which):
    want = ref.qdq_activation(qin.detach().cpu().to(F32), ref.resolve_scheme(cfg.scheme),
                              scale=getattr(cfg, f"{which}_scale", None), gscale=getattr(cfg, f"{which}_gscale", None),
                              which=which)
    if not torch.equal(got.detach().cpu().to(F32), want):
        raise AssertionError(f"{stage}: the layer's QDQ output is not the spec's QDQ of its own input at "
                             f"{int((got.detach().cpu().to(F32) != want).sum())} elements")


def _pass(name, seen, a1_in, ids, cfg, activation, sc, c_prec):
    """The local stages of one experts pass; returns its h2 (float64 [P, H])."""
    scheme = ref.resolve_scheme(cfg.scheme)
    w13 = ref.dequant_weight(cfg.w13_q, getattr(cfg, "w13_gscale", None), scheme, "w13").cpu()
    w2 = ref.dequant_weight(cfg.w2_q, getattr(cfg, "w2_gscale", None), scheme, "w2").cpu()
    T, k = ids.shape
    e_of = ids.reshape(-1)
    tok = torch.arange(T).repeat_interleave(k)
    _qdq_exact(f"{name} QDQ #1", seen["a1"], a1_in, cfg, "a1")
    a1 = seen["a1"].detach().cpu().to(F64)[tok]
    h1 = seen["h1"].detach().cpu().to(F64)
    want = _per_expert(a1, e_of, w13)
    bound = tl.gemm_bound(a1.abs(), e_of, w13.abs(), c_prec, sc["gemm1"])
    b13 = getattr(cfg, "w13_bias", None)
    if b13 is not None:
        want = want + b13.detach().cpu().to(F64)[e_of]
        bound = bound + tl.bias_bound(want.abs() + bound, sc["bias_rounding"])
    _within(f"{name} GEMM1 (gemm1{', bias_rounding' if b13 is not None else ''})", h1, want, bound)
    g = ref.reference_activation(h1, activation)
    a2_in = seen["a2_in"].detach().cpu().to(F64)
    _within(f"{name} activation", a2_in, g, tl.activation_bound(h1, torch.zeros_like(h1), g, activation,
                                                                 sc["activation"]))
    _qdq_exact(f"{name} QDQ #2", seen["a2"], seen["a2_in"], cfg, "a2")
    a2 = seen["a2"].detach().cpu().to(F64)
    h2 = seen["h2"].detach().cpu().to(F64)
    want = _per_expert(a2, e_of, w2)
    bound = tl.gemm_bound(a2.abs(), e_of, w2.abs(), c_prec, sc["gemm2"])
    b2 = getattr(cfg, "w2_bias", None)
    if b2 is not None:
        want = want + b2.detach().cpu().to(F64)[e_of]
        bound = bound + tl.bias_bound(want.abs() + bound, sc["bias_rounding"])
    _within(f"{name} GEMM2 (gemm2{', bias_rounding' if b2 is not None else ''})", h2, want, bound)
    return h2


def check_stages(problem, t=None, cfg=None, moe=None, c_prec: float = 0.0, scale=None):
    """Every stage of the layer within its own term (module docstring)."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    sc = tl.term_scales(scale)
    extras = extras_of(problem, t)
    trace = reference_trace(problem, t, cfg, extras)
    check_routing(problem, t, trace, scale)
    arch = problem.arch
    w32, ids = layer_route(problem, t)
    w32, ids = w32.detach().cpu(), ids.cpu().long()
    seen, seen_s = {}, {}
    moe.experts.trace = seen
    if moe.shared_experts is not None:
        moe.shared_experts.trace = seen_s
    try:
        out = run(moe, t).detach().cpu()
    finally:
        moe.experts.trace = None
        if moe.shared_experts is not None:
            moe.shared_experts.trace = None
    if problem.T == 0:
        return {}
    x32 = t.hidden.detach().cpu().to(F32)
    a1_in = x32
    combine = w32
    if arch.router_weight_on_input:
        a1_in = x32 * w32
        din, _, _ = tl.input_interval(trace, sc)
        _within("weighted input (input_weight)", a1_in.to(F64), trace.a1_in.to(F64), din)
        combine = torch.ones_like(w32)
    h2 = _pass("experts", seen, a1_in, ids, cfg, arch.activation, sc, c_prec)
    T, k = ids.shape
    H = h2.shape[1]
    wk = combine.to(F64).reshape(T, k, 1)
    y = h2.reshape(T, k, H)
    want = (wk * y).sum(1)
    bound = tl.sum_bound(wk, torch.zeros_like(wk), y.abs(), sc["sum"])
    if moe.shared_experts is not None:
        zeros = torch.zeros(T, 1, dtype=torch.int64)
        hs = _pass("shared MLP", seen_s, x32, zeros, extras.shared_cfg, arch.activation, sc, c_prec)
        bound = bound + sc["sum"] * tl.U * (want.abs() + bound + hs.abs())
        want = want + hs
    bound = bound + sc["output_cast"] * tl.OUTPUT_U[out.dtype] * (want.abs() + bound)
    _within("combine (sum, output_cast)", out.to(F64), want, bound)
    return {}
