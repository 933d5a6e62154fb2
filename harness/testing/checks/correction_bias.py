"""Correction bias used for the routing weights (DeepSeek-V3 noaux_tc): the
e_score_correction_bias is added to the scores for expert SELECTION only; the
weights are the selected experts' UNBIASED scores (renormalized, scaled). A
layer that gathers the biased scores as weights moves every output."""
from __future__ import annotations

import torch

from harness.moe import reference as ref
from harness.moe import tolerance

from harness.testing.checks.oracle import layer_route


def _weights_from(values: torch.Tensor, ids: torch.Tensor, arch) -> torch.Tensor:
    w = torch.gather(values, 1, ids)
    if arch.renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w * float(arch.routed_scaling_factor)


def check_correction_bias_for_selection_only(problem, t=None):
    """The layer selects on scores + bias (its experts are the reference's) and
    weighs with the unbiased scores (its weights are the reference's within
    (2E + 2k + 18 + s) u (tolerance, term 6), and NOT the biased scores' weights)."""
    if t is None:
        t = problem.tensors()
    arch = problem.arch
    assert arch.score_correction, "this check needs a problem with a correction bias (score_correction=True)"
    bias = t.e_score_correction_bias
    trace_w, trace_ids = ref.reference_route(t.router_logits, arch.top_k, scoring=arch.scoring,
                                             renormalize=arch.renormalize, n_group=arch.n_group,
                                             topk_group=arch.topk_group,
                                             routed_scaling_factor=arch.routed_scaling_factor,
                                             e_score_correction_bias=bias)
    w32, ids = layer_route(problem, t)
    ids = ids.cpu().long()
    if not torch.equal(ids, trace_ids):
        plain_ids = ref.reference_route(t.router_logits, arch.top_k, scoring=arch.scoring,
                                        renormalize=arch.renormalize, n_group=arch.n_group,
                                        topk_group=arch.topk_group)[1]
        why = (" (they are the selection WITHOUT the bias: the correction bias was ignored for selection)"
               if torch.equal(ids, plain_ids) else "")
        bad = torch.nonzero((ids != trace_ids).any(-1)).flatten()[:2].tolist()
        raise AssertionError(f"experts selected with e_score_correction_bias differ from the reference in tokens "
                             f"{bad}: layer {ids[bad].tolist()} vs reference {trace_ids[bad].tolist()}{why}")
    dw = tolerance.routing_weight_tolerance(trace_w, problem.E,
                                            ref.exp_argument_spread(t.router_logits, trace_ids, arch.scoring))
    err = (w32.cpu().double() - trace_w).abs()
    if bool((err <= dw).all()):
        keys = ref.reference_keys(t.router_logits, arch.scoring, bias)
        biased = _weights_from(keys, trace_ids, arch)
        return {"bias_moves_weights": bool(((biased - trace_w).abs() > dw).any())}
    keys = ref.reference_keys(t.router_logits, arch.scoring, bias)
    biased = _weights_from(keys, trace_ids, arch)
    like_biased = bool(((w32.cpu().double() - biased).abs() <= dw + 4 * tolerance.U * biased.abs()).all())
    bad = torch.nonzero(err > dw)[:3].tolist()
    raise AssertionError(
        f"routing weights differ from the unbiased scores' weights at {int((err > dw).sum())} of {err.numel()} "
        f"(token, slot), e.g. {bad}: layer {[float(w32[tuple(i)]) for i in bad]} vs reference "
        f"{[float(trace_w[tuple(i)]) for i in bad]}"
        + ("; they are the weights of the BIASED scores: e_score_correction_bias was used for the weights, "
           "not only for the selection" if like_biased else ""))
