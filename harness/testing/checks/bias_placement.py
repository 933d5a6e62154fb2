"""Expert bias added before the dequantized GEMM's scale (gpt-oss biases): the
bias is a float tensor added to the FULLY scaled GEMM result; a kernel that
adds it to the accumulator before its post-GEMM scale (1 / global scale of
two-level weights, the activation scale) multiplies the bias by that scale.
A local check on the layer's own GEMM inputs and outputs (its trace seam):
h1 = a1 @ W13[e].T + w13_bias[e], h2 = a2 @ W2[e].T + w2_bias[e], each within
its float32 GEMM bound plus the bias addition's rounding."""
from __future__ import annotations

import torch

from harness.moe import reference as ref
from harness.moe.tolerance import U, gamma

from harness.testing.checks.oracle import layer_route
from harness.testing.checks.problem import run, setup

F64 = torch.float64


def _gemm_stage(what, x, ids, w, bias, got, c_prec=0.0):
    """x [P, K] float64 (the layer's GEMM input), w [E, N, K] float64."""
    P, K = x.shape
    e_of = ids.reshape(-1)
    G = torch.zeros(P, w.shape[1], dtype=F64)
    A = torch.zeros_like(G)
    for e in range(w.shape[0]):
        rows = (e_of == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            G[rows] = x[rows] @ w[e].T
            A[rows] = x[rows].abs() @ w[e].abs().T
    b = bias[e_of]
    want = G + b
    tol = (gamma(K) + c_prec) * A + U * (want.abs() + (gamma(K) + c_prec) * A) + 2.0**-140
    err = (got - want).abs()
    if bool((err <= tol).all()):
        return
    rs = []
    for e in range(w.shape[0]):
        rows = (e_of == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            bb = b[rows]
            rs.append((e, float(((got[rows] - G[rows]) * bb).sum() / (bb * bb).sum().clamp(min=2.0**-1000))))
    raise AssertionError(
        f"{what}: GEMM output + bias off by up to {float((err / tol).max()):.3g} of its bound; per expert the "
        f"bias entered times {[(e, round(r, 6)) for e, r in rs[:4]]} (1 = added after the GEMM's full scaling; "
        f"another factor: the bias was added before the dequantized GEMM's scale)")


def check_bias_after_scale(problem, t=None, cfg=None, moe=None, c_prec: float = 0.0):
    if t is None:
        t, _, cfg, moe = setup(problem)
    assert problem.expert_bias is not None, "this check needs a problem with expert biases"
    moe.experts.trace = seen = {}
    try:
        run(moe, t)
    finally:
        moe.experts.trace = None
    scheme = ref.resolve_scheme(cfg.scheme)
    w13 = ref.dequant_weight(cfg.w13_q, cfg.w13_gscale, scheme, "w13").cpu()
    w2 = ref.dequant_weight(cfg.w2_q, cfg.w2_gscale, scheme, "w2").cpu()
    _, ids = layer_route(problem, t)
    ids = ids.cpu().long()
    k = ids.shape[1]
    a1 = seen["a1"].detach().cpu().double().repeat_interleave(k, dim=0)
    _gemm_stage("GEMM1 (w13_bias)", a1, ids, w13, cfg.w13_bias.cpu().double(), seen["h1"].detach().cpu().double(),
                c_prec)
    _gemm_stage("GEMM2 (w2_bias)", seen["a2"].detach().cpu().double(), ids, w2, cfg.w2_bias.cpu().double(),
                seen["h2"].detach().cpu().double(), c_prec)
    return {}
