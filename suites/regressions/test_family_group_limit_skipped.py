"""DeepSeek grouped_topk / noaux_tc: the top-k is taken inside the topk_group
best of n_group expert groups; a refactor that takes the global top-k skips the
limit wherever it binds. Generic check: check_group_limit."""
import harness.moe.layer as layer
import harness.moe.routing as routing
from harness.testing.checks import problem as pb
from harness.testing.checks.group_limit import check_group_limit
from harness.testing.checks.oracle import check_matches_reference

from suites.regressions.inject import detects


def _problems():
    return [pb.family_problem("deepseek_v3", "nvfp4", T=12),
            pb.family_problem("deepseek_v3", "w_mxfp4", T=12, score_correction=False)]  # grouped_topk: groups by max


def test_selection_stays_in_the_kept_groups():
    for p in _problems():
        assert check_group_limit(p)["binds"] > 0  # the limit changes the selection here: the check is not vacuous


def test_skipped_group_limit_is_detected(monkeypatch):
    orig = routing.route_arch
    global_topk = lambda logits, arch, bias=None: orig(logits, arch.replace(n_group=1, topk_group=1), bias)  # noqa: E731
    monkeypatch.setattr(routing, "route_arch", global_topk)
    monkeypatch.setattr(layer.routing, "route_arch", global_topk)
    for p in _problems():
        detects(check_group_limit, p, match="group limit skipped")
        detects(check_matches_reference, p, match="routing differs")
