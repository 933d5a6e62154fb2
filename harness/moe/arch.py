"""The architecture of one MoE layer as data: `MoEArch`, the row that the
layer (FusedMoE, routing, experts), the float64 reference and the derived
tolerance all read. Nothing here imports torch.

What a row says (docs/moe-api.md, "What the layer computes"):

    top_k, scoring        "softmax" | "sigmoid": scores over all E experts, top-k
                          selected on them; "softmax_topk": top-k selected on the
                          logits, softmax over the k selected logits (gpt-oss,
                          Mixtral in HF); renormalize is then moot
    renormalize           the k selected weights divided by their sum
    activation            a row of harness.moe.activations (silu, swiglu_clamp)
    n_group, topk_group   group-limited selection: the E experts in n_group
                          groups of E/n_group; the topk_group best groups kept,
                          top-k inside them (1/1: none)
    score_correction      the layer has e_score_correction_bias [E], added to
                          the scores for SELECTION only (DeepSeek-V3 noaux_tc);
                          groups are then ranked by the sum of their top-2
                          biased scores, otherwise by their best score (vLLM)
    routed_scaling_factor multiplies the routed (top-k) output, never the shared
                          experts
    router_weight_on_input  the routing weight multiplies the expert INPUT
                          (before QDQ #1) and not the output (Llama-4; top_k 1)
    expert_bias           per-expert biases w13_bias [E, 2I], w2_bias [E, H],
                          added to each GEMM's output (gpt-oss)
    shared_experts        a dense MLP (shared_w13 [2S, H], shared_w2 [H, S]) in
                          the same scheme, added unweighted (DeepSeek, Llama-4)

`ROUTING_ROWS` is the table of routing kinds the strategies draw from
(harness.strategies.moe_problems), `FAMILIES` the rows of real model
families (their published values) for docs and tiny models. A new kind is a
new row; the layer reads the fields, never a family name.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional

SCORINGS = ("softmax", "sigmoid", "softmax_topk")
ACTIVATION_NAMES = ("silu", "swiglu_clamp")
GROUP_SCORES = ("max", "top2_sum")


@dataclass(frozen=True)
class MoEArch:
    top_k: int
    scoring: str = "softmax"
    renormalize: bool = True
    activation: str = "silu"
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    score_correction: bool = False
    router_weight_on_input: bool = False
    expert_bias: bool = False
    shared_experts: bool = False

    def __post_init__(self):
        if self.scoring not in SCORINGS:
            raise ValueError(f"scoring: unknown {self.scoring!r}; expected one of {', '.join(SCORINGS)}")
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(f"activation: unknown {self.activation!r}; expected one of {', '.join(ACTIVATION_NAMES)}")
        if int(self.top_k) < 1:
            raise ValueError(f"top_k={self.top_k} must be >= 1")
        if int(self.n_group) < 1:
            raise ValueError(f"n_group={self.n_group} must be >= 1")
        if not 1 <= int(self.topk_group) <= int(self.n_group):
            raise ValueError(f"topk_group={self.topk_group} must be in [1, n_group={self.n_group}]")
        if self.scoring == "softmax_topk" and (self.n_group > 1 or self.score_correction):
            raise ValueError("scoring 'softmax_topk' selects on the logits: n_group / e_score_correction_bias "
                             "need scoring 'softmax' or 'sigmoid'")
        f = float(self.routed_scaling_factor)
        if not (f > 0 and f < float("inf")):
            raise ValueError(f"routed_scaling_factor={self.routed_scaling_factor} must be a finite positive number")
        if self.router_weight_on_input and int(self.top_k) != 1:
            raise ValueError(f"router_weight_on_input needs top_k == 1 (vLLM's apply_router_weight_on_input), "
                             f"got top_k={self.top_k}")

    @property
    def grouped(self) -> bool:
        return self.n_group > 1

    @property
    def group_score(self) -> str:
        """How groups are ranked: "top2_sum" (sum of the group's two best biased
        scores, DeepSeek-V3) with a correction bias, else "max" (vLLM grouped_topk)."""
        return "top2_sum" if self.score_correction else "max"

    @property
    def selects_on_logits(self) -> bool:
        """Selection keys are the exact logits (softmax and sigmoid are strictly
        increasing) unless a correction bias is added to the scores."""
        return not self.score_correction

    def validate(self, num_experts: int) -> "MoEArch":
        """ValueError naming the field when the row does not fit E experts."""
        E = int(num_experts)
        if self.top_k > E:
            raise ValueError(f"top_k={self.top_k} must be in [1, E={E}]")
        if E % self.n_group:
            raise ValueError(f"n_group={self.n_group} must divide the number of experts E={E}")
        if self.top_k > self.topk_group * (E // self.n_group):
            raise ValueError(f"top_k={self.top_k} exceeds the experts of the kept groups: "
                             f"topk_group={self.topk_group} x E/n_group={E // self.n_group}")
        return self

    def replace(self, **kw) -> "MoEArch":
        return replace(self, **kw)

    def as_kwargs(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def make_arch(*, top_k, renormalize=True, scoring="softmax", activation="silu", n_group=1, topk_group=1,
              routed_scaling_factor=1.0, e_score_correction_bias=None, router_weight_on_input=False,
              w13_bias=None, w2_bias=None, shared_w13=None, shared_w2=None, num_experts: Optional[int] = None,
              **_ignored) -> MoEArch:
    """The row from the flat keyword arguments of build_emulated_moe (tensors
    only say whether the feature is present)."""
    if (w13_bias is None) != (w2_bias is None):
        raise ValueError("w13_bias and w2_bias come together (gpt-oss has both); got only one")
    if (shared_w13 is None) != (shared_w2 is None):
        raise ValueError("shared_w13 and shared_w2 come together; got only one")
    arch = MoEArch(top_k=int(top_k), scoring=scoring, renormalize=bool(renormalize), activation=activation,
                   n_group=int(n_group), topk_group=int(topk_group),
                   routed_scaling_factor=float(routed_scaling_factor),
                   score_correction=e_score_correction_bias is not None,
                   router_weight_on_input=bool(router_weight_on_input), expert_bias=w13_bias is not None,
                   shared_experts=shared_w13 is not None)
    if num_experts is not None:
        arch.validate(num_experts)
    return arch


@dataclass(frozen=True)
class RoutingRow:
    """A routing kind, as the strategies draw it: which scorings it takes and
    which features its layers have (the numbers are drawn per problem)."""
    name: str
    scorings: tuple
    grouped: bool = False  # n_group > 1 drawn
    score_correction: bool = False  # an e_score_correction_bias drawn
    routed_scaling: bool = False  # routed_scaling_factor != 1 drawn
    weight_on_input: bool = False  # top_k 1, router weight on the expert input
    renormalize: Optional[bool] = None  # None: drawn


ROUTING_ROWS: dict = {row.name: row for row in (
    RoutingRow("topk", ("softmax", "sigmoid")),  # Mixtral, Qwen-MoE
    RoutingRow("softmax_topk", ("softmax_topk",)),  # gpt-oss
    RoutingRow("grouped_topk", ("softmax", "sigmoid"), grouped=True, routed_scaling=True),  # DeepSeek-V2
    RoutingRow("noaux_tc", ("sigmoid",), grouped=True, score_correction=True, routed_scaling=True),  # DeepSeek-V3
    RoutingRow("llama4", ("sigmoid",), weight_on_input=True, renormalize=False),  # Llama-4
)}

# Published values of real families (config.json of each), for docs and tiny models.
FAMILIES: dict = {
    "mixtral": MoEArch(top_k=2, scoring="softmax", renormalize=True),
    "qwen3_moe": MoEArch(top_k=8, scoring="softmax", renormalize=True),
    "deepseek_v3": MoEArch(top_k=8, scoring="sigmoid", renormalize=True, n_group=8, topk_group=4,
                           routed_scaling_factor=2.5, score_correction=True, shared_experts=True),
    "llama4": MoEArch(top_k=1, scoring="sigmoid", renormalize=False, router_weight_on_input=True,
                      shared_experts=True),
    "gpt_oss": MoEArch(top_k=4, scoring="softmax_topk", renormalize=False, activation="swiglu_clamp",
                       expert_bias=True),
}
