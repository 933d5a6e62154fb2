"""DeepSeek-V3 noaux_tc: the e_score_correction_bias is for expert SELECTION
only; a refactor that gathers the biased scores as the routing weights (one
tensor for both) moves every output. Generic check:
check_correction_bias_for_selection_only (and the reference oracle)."""
import torch

import harness.moe.layer as layer
import harness.moe.routing as routing
from harness.testing.checks import problem as pb
from harness.testing.checks.correction_bias import check_correction_bias_for_selection_only
from harness.testing.checks.oracle import check_matches_reference

from suites.regressions.inject import detects


def _problem():
    return pb.family_problem("deepseek_v3", "nvfp4", T=12)


def test_weights_are_the_unbiased_scores():
    assert check_correction_bias_for_selection_only(_problem())["bias_moves_weights"]
    check_matches_reference(_problem())


def test_bias_in_the_weights_is_detected(monkeypatch):
    orig = routing.route_arch

    def biased_weights(logits, arch, bias=None):
        w, ids = orig(logits, arch, bias)
        keys = routing.selection_keys(logits.float(), arch, bias)
        w = torch.gather(keys, 1, ids)
        if arch.renormalize:
            w = w / w.sum(-1, keepdim=True)
        return w * arch.routed_scaling_factor, ids

    monkeypatch.setattr(routing, "route_arch", biased_weights)
    monkeypatch.setattr(layer.routing, "route_arch", biased_weights)
    detects(check_correction_bias_for_selection_only, _problem(), match="e_score_correction_bias was used for the weights")
    detects(check_matches_reference, _problem(), match="routing weights differ")


def test_bias_ignored_for_selection_is_detected(monkeypatch):
    orig = routing.route_arch
    monkeypatch.setattr(routing, "route_arch", lambda logits, arch, bias=None: orig(
        logits, arch.replace(score_correction=False), None))
    detects(check_correction_bias_for_selection_only, _problem(), match="correction bias was ignored for selection")
