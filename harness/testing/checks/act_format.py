"""Activation format taken from the weight row: a scheme row names the weight
format and, separately, the activation format (w_mxfp4_a_fp8: MXFP4 weights,
per-tensor FP8 activations; w_mxfp4_a_mxfp6_*: MXFP6 activations; w_mxfp4
and w_mxfp8: none, W4A16 / W8A16). A layer that quantizes activations in the
weight format passes every row whose two formats agree and fails the others.
Exact seams: every QDQ is dispatched with the row's activation key, and the
layer's QDQ outputs are the spec's QDQ (harness.moe.reference.qdq_activation
with the row) of its own QDQ inputs, bit for bit."""
from __future__ import annotations

import torch

from harness.moe import reference as ref

from harness.testing.checks.double_qdq import record_act_qdq
from harness.testing.checks.oracle import layer_route
from harness.testing.checks.problem import run, setup


def check_activation_format(problem, t=None, cfg=None, moe=None):
    if t is None:
        t, _, cfg, moe = setup(problem)
    scheme = ref.resolve_scheme(problem.scheme)
    moe.experts.trace = seen = {}
    try:
        with record_act_qdq() as calls:
            run(moe, t)
    finally:
        moe.experts.trace = None
    keys = sorted({repr(c["quant_dtype"]) for c in calls})
    wrong = [c["quant_dtype"] for c in calls if c["quant_dtype"] != scheme.quant_dtype]
    if scheme.act_fmt is None:
        assert not calls, (f"{scheme.name} quantizes no activations (act_fmt None; weights {scheme.weight_fmt}) but "
                           f"the layer ran {len(calls)} activation QDQ calls with keys {keys}: the activation format "
                           f"was taken from the weight row")
    else:
        assert not wrong, (f"{scheme.name}: activation QDQ dispatched with {sorted(set(map(repr, wrong)))}, the "
                           f"row's activation key is {scheme.quant_dtype!r} (act_fmt {scheme.act_fmt}, weights "
                           f"{scheme.weight_fmt})")
    x32 = t.hidden.detach().to(torch.float32)
    if problem.weight_on_input:
        x32 = x32 * layer_route(problem, t)[0]
    stages = (("a1", x32.cpu(), seen["a1"]), ("a2", seen["a2_in"].detach().cpu().float(), seen["a2"]))
    for which, qin, got in stages:
        want = ref.qdq_activation(qin, scheme, scale=getattr(cfg, f"{which}_scale", None),
                                  gscale=getattr(cfg, f"{which}_gscale", None), which=which)
        got = got.detach().cpu().float()
        if not torch.equal(got, want):
            n = int((got != want).sum())
            raise AssertionError(f"{scheme.name}: the layer's {which} differs from the spec's QDQ in the activation "
                                 f"format {scheme.act_fmt} at {n} of {got.numel()} elements (weights "
                                 f"{scheme.weight_fmt}: an activation format taken from the weight row?)")
    return {"calls": len(calls)}
