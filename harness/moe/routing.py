"""Top-k routing, every kind a row field of harness.moe.arch.MoEArch reads:
softmax / sigmoid scores over all experts, or "softmax_topk" (top-k of the
logits, softmax over the k selected); optional group-limited selection
(n_group / topk_group) and a score-correction bias for selection only
(DeepSeek-V3 noaux_tc); renormalization; routed scaling.

Selection keys (what the top-k and the group ranking sort):
  * no correction bias: the exact float32 LOGITS (softmax and sigmoid are
    strictly increasing, so the k largest scores are the k largest logits;
    sorting rounded scores is not exact: torch's CPU sigmoid rounds EQUAL
    inputs differently in its vector body and its scalar tail). Groups are
    ranked by their best logit (= their best score).
  * with a correction bias: key = fl32(score) + bias in float32, where
    fl32(score) is the float64 score rounded once to float32 (the float32
    closest to the exact score; the same on every position and device, up to
    a float64 ulp at a float32 rounding midpoint). Groups are ranked by the
    float32 sum of their two best keys (one key for groups of one).
  The float64 reference computes the same float32 keys, so selection is
  compared exactly.

Tie-breaking is deterministic: among equal keys (equal group scores) the
LOWEST expert (group) index wins, via a stable descending sort (torch.topk
does not promise this). Experts outside the kept groups get key -inf. On
CUDA the selection is harness.kernels.topk (one launch, the sort's indices
bit for bit), elsewhere the sort itself.
Weights: the unbiased float32 scores of the selected experts (softmax_topk:
softmax over the k selected logits), divided by their float32 sum in slot
order from +0.0 when renormalize, times routed_scaling_factor
(harness.kernels.topk.weights_expression; on CUDA the top-k launch writes
the same bits). On CUDA the softmax scores of ungrouped rows without a
correction bias come from that launch too: torch.softmax's formula, whose
bits may differ from torch's by the order of the row's sum, within the
routing weights' bound like torch's own. Shapes are fixed ([T, k]) and nothing reads
tensor values on the host, so routing can be captured / compiled. T = 0
gives empty [0, k] outputs.
"""
from __future__ import annotations

from typing import Optional

import torch

from harness.kernels import topk
from harness.moe.arch import SCORINGS, MoEArch

F32, F64 = torch.float32, torch.float64


def _scores(logits32: torch.Tensor, scoring: str, dtype=F32) -> torch.Tensor:
    x = logits32.to(dtype)
    return torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)


def selection_keys(logits32: torch.Tensor, arch: MoEArch, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """[T, E] float32 keys the selection sorts (module docstring)."""
    if not arch.score_correction:
        return logits32
    return _scores(logits32, arch.scoring, F64).to(F32) + bias.to(device=logits32.device, dtype=F32)


def group_mask(keys: torch.Tensor, arch: MoEArch) -> torch.Tensor:
    """[T, E] bool: the experts of the topk_group best groups (all True when ungrouped)."""
    T, E = keys.shape
    if not arch.grouped:
        return torch.ones(T, E, dtype=torch.bool, device=keys.device)
    G = arch.n_group
    kg = keys.reshape(T, G, E // G)
    if arch.group_score == "top2_sum":
        top = torch.topk(kg, min(2, E // G), dim=-1).values
        gs = top[..., 0] if top.shape[-1] == 1 else top[..., 0] + top[..., 1]
    else:
        gs = kg.amax(dim=-1)
    kept = torch.sort(gs, dim=-1, descending=True, stable=True).indices[:, : arch.topk_group]
    gmask = torch.zeros(T, G, dtype=torch.bool, device=keys.device).scatter(1, kept, True)
    return gmask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E)


def route_arch(router_logits: torch.Tensor, arch: MoEArch, e_score_correction_bias: Optional[torch.Tensor] = None):
    """router_logits [T, E] -> (topk_weights float32 [T, k], topk_ids int64 [T, k])."""
    if router_logits.dim() != 2:
        raise ValueError(f"router_logits must be [T, E], got shape {tuple(router_logits.shape)}")
    arch.validate(router_logits.shape[1])
    if arch.score_correction and e_score_correction_bias is None:
        raise ValueError("the row has a score correction: e_score_correction_bias [E] is required")
    logits = router_logits.to(F32)
    k = int(arch.top_k)
    keys = selection_keys(logits, arch, e_score_correction_bias)
    if arch.grouped:
        keys = torch.where(group_mask(keys, arch), keys, torch.full_like(keys, -torch.inf))
    kernel = keys.is_cuda and topk.applies(keys.shape[1], k)  # the sort's indices in one launch
    scale = float(arch.routed_scaling_factor)
    if arch.scoring == "softmax_topk":
        topk_ids = topk.topk_ids(keys, k) if kernel else _sorted_ids(keys, k)
        topk_weights = torch.softmax(torch.gather(logits, 1, topk_ids), dim=-1)
        if scale != 1.0:  # x * 1.0 is x, bit for bit: no pass for it
            topk_weights = topk_weights * scale
        return topk_weights, topk_ids
    if kernel and arch.scoring == "softmax" and keys is logits:  # the softmax too in the one launch
        return topk.topk_route(keys, None, k, arch.renormalize, scale)[::-1]
    scores = _scores(logits, arch.scoring)
    if kernel:  # ids and weights in the same launch, the expression's bits
        return topk.topk_route(keys, scores, k, arch.renormalize, scale)[::-1]
    topk_ids = _sorted_ids(keys, k)
    return topk.weights_expression(scores, topk_ids, arch.renormalize, scale), topk_ids


def _sorted_ids(keys: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :k].to(torch.int64)


def route(router_logits: torch.Tensor, top_k: int, *, scoring: str = "softmax", renormalize: bool = False,
          n_group: int = 1, topk_group: int = 1, routed_scaling_factor: float = 1.0,
          e_score_correction_bias: Optional[torch.Tensor] = None):
    """router_logits [T, E] -> (topk_weights float32 [T, k], topk_ids int64 [T, k]).

    Scores are computed in float32. With renormalize the k selected weights are
    divided by their sum (for softmax and sigmoid alike)."""
    if router_logits.dim() != 2:
        raise ValueError(f"router_logits must be [T, E], got shape {tuple(router_logits.shape)}")
    num_experts = router_logits.shape[1]
    if not 1 <= int(top_k) <= num_experts:
        raise ValueError(f"top_k={top_k} must be in [1, E={num_experts}]")
    if scoring not in SCORINGS:
        raise ValueError(f"unknown scoring {scoring!r}; expected one of {', '.join(SCORINGS)}")
    arch = MoEArch(top_k=int(top_k), scoring=scoring, renormalize=bool(renormalize), n_group=int(n_group),
                   topk_group=int(topk_group), routed_scaling_factor=float(routed_scaling_factor),
                   score_correction=e_score_correction_bias is not None)
    return route_arch(router_logits, arch, e_score_correction_bias)
