"""Llama-4 (vLLM apply_router_weight_on_input): the top-1 routing weight
multiplies the expert INPUT before QDQ #1 and the output is summed with weight
1. Refactors that keep the output weighting too (weight applied twice), or drop
the input one, ship silently where weights are near 1. Generic check:
check_router_weight_on_input."""
import torch

import harness.moe.layer as layer
from harness.moe import routing
from harness.testing.checks import problem as pb
from harness.testing.checks.router_weight import check_router_weight_on_input

from suites.regressions.inject import detects

SCHEMES = ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp4")


def _weights_on(both_input: bool, output: bool):
    def forward(self, hidden, router_logits):
        w, ids = routing.route_arch(router_logits, self.arch, self.e_score_correction_bias)
        x = hidden.float() * w if both_input else hidden.float()
        out = self.experts.apply(x, w if output else torch.ones_like(w), ids, activation=self.arch.activation)
        if self.shared_experts is not None:
            T = hidden.shape[0]
            out = out + self.shared_experts.apply(hidden.float(), torch.ones(T, 1), torch.zeros(T, 1, dtype=torch.long),
                                                  activation=self.arch.activation)
        return out.to(hidden.dtype)
    return forward


def test_weight_on_the_input_only():
    for s in SCHEMES:
        check_router_weight_on_input(pb.family_problem("llama4", s, T=12))


def test_weight_on_input_and_output_is_detected(monkeypatch):
    monkeypatch.setattr(layer.FusedMoE, "forward", _weights_on(True, True))
    for s in SCHEMES:
        detects(check_router_weight_on_input, pb.family_problem("llama4", s, T=12),
                match="weight applied on BOTH the input and the output")


def test_weight_on_output_only_is_detected(monkeypatch):
    monkeypatch.setattr(layer.FusedMoE, "forward", _weights_on(False, True))
    for s in SCHEMES:
        detects(check_router_weight_on_input, pb.family_problem("llama4", s, T=12), match="UNWEIGHTED input")
