"""Top-k routing: softmax or sigmoid scoring, optional renormalization.

Tie-breaking is deterministic: among equal scores the LOWEST expert index wins
(torch.topk does not promise this). Implemented with a stable descending sort,
which keeps equal scores in index order. Shapes are fixed ([T, k]) and nothing
reads tensor values on the host, so routing can be captured / compiled.
T = 0 gives empty [0, k] outputs.
"""
from __future__ import annotations

import torch

SCORINGS = ("softmax", "sigmoid")


def route(router_logits: torch.Tensor, top_k: int, *, scoring: str = "softmax", renormalize: bool = False):
    """router_logits [T, E] -> (topk_weights float32 [T, k], topk_ids int64 [T, k]).

    Scores are computed in float32. With renormalize the k selected weights are
    divided by their sum (for softmax and sigmoid alike)."""
    if router_logits.dim() != 2:
        raise ValueError(f"router_logits must be [T, E], got shape {tuple(router_logits.shape)}")
    num_experts = router_logits.shape[1]
    if not 1 <= int(top_k) <= num_experts:
        raise ValueError(f"top_k={top_k} must be in [1, E={num_experts}]")
    logits = router_logits.to(torch.float32)
    if scoring == "softmax":
        scores = torch.softmax(logits, dim=-1)
    elif scoring == "sigmoid":
        scores = torch.sigmoid(logits)
    else:
        raise ValueError(f"unknown scoring {scoring!r}; expected one of {', '.join(SCORINGS)}")
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices  # exact: both scorings are increasing
    topk_ids = order[:, : int(top_k)].to(torch.int64)
    topk_weights = torch.gather(scores, 1, topk_ids)
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return topk_weights.to(torch.float32), topk_ids
