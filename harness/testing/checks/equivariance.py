"""Equivariance: permuting tokens, or relabelling experts together with the
router columns, permutes (or leaves) the output within tolerance."""
from __future__ import annotations

import dataclasses

import torch

import harness.formats as hf

from harness.testing.checks.problem import describe_mismatch, extras_of, make_moe, output_tolerance, reference_trace, run, setup


def permute_experts(cfg, perm):
    """Config whose expert i is expert perm[i] of cfg."""
    def pq(q):
        return hf.QuantizedTensor(q.codes[perm], q.scales[perm],
                                  q.global_scale[perm] if (q.global_scale is not None and q.global_scale.dim()) else q.global_scale,
                                  q.fmt, q.scale_mode, q.rounding, q.dtype)
    kw = dict(w13_q=pq(cfg.w13_q), w2_q=pq(cfg.w2_q))
    for name in ("w13_gscale", "w2_gscale", "w13_bias", "w2_bias"):
        v = getattr(cfg, name)
        if v is not None and v.dim():
            kw[name] = v[perm]
    return dataclasses.replace(cfg, **kw)


def check_token_equivariance(problem, t=None, cfg=None, moe=None, seed=0):
    """moe(P x) == P moe(x) for a token permutation P (within the reference
    tolerance of both sides)."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    T = problem.T
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(seed))
    out = run(moe, t)
    tp = dataclasses.replace(t, hidden=t.hidden[perm], router_logits=t.router_logits[perm])
    outp = run(moe, tp)
    tol = output_tolerance(reference_trace(problem, t, cfg), problem, cfg, t.hidden.dtype)
    err = (outp.double() - out[perm].double()).abs()
    bad = ~(err <= 2 * tol[perm])
    assert not bool(bad.any()), describe_mismatch("token permutation", outp, out[perm], 2 * tol[perm], bad)
    return {"bitwise": bool(torch.equal(outp, out[perm]))}


def check_expert_equivariance(problem, t=None, cfg=None, moe=None, seed=0):
    """Relabelling experts together with the router columns (and their biases,
    correction bias included) leaves the output unchanged. Only for logits
    without ties (problem.logits == "distinct": with ties the lowest-index rule
    depends on the labels) and ungrouped routing (groups are label ranges)."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    assert problem.logits == "distinct", "expert equivariance needs tie-free router logits"
    assert problem.n_group == 1, "expert equivariance needs ungrouped routing"
    E = problem.E
    perm = torch.randperm(E, generator=torch.Generator().manual_seed(seed))
    out = run(moe, t)
    cfgp = permute_experts(cfg, perm)
    extras = extras_of(problem, t)
    bias = extras.e_score_correction_bias
    tp = dataclasses.replace(t, router_logits=t.router_logits[:, perm],
                             e_score_correction_bias=None if bias is None else bias[perm])
    outp = run(make_moe(problem, cfgp, extras=dataclasses.replace(extras, e_score_correction_bias=tp.e_score_correction_bias)), tp)
    tol = output_tolerance(reference_trace(problem, t, cfg), problem, cfg, t.hidden.dtype)
    err = (outp.double() - out.double()).abs()
    bad = ~(err <= 2 * tol)
    assert not bool(bad.any()), describe_mismatch("expert relabelling", outp, out, 2 * tol, bad)
    return {"bitwise": bool(torch.equal(outp, out))}
