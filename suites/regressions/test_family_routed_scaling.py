"""DeepSeek routed_scaling_factor: it multiplies the routed (top-k) output once
and never the shared experts. Refactors that apply it in the routing weights
AND after the experts, or to the sum with the shared MLP, ship silently on
factors near 1; DeepSeek-V3's is 2.5. Generic check: check_routed_scaling."""
from harness.testing.checks import problem as pb
from harness.testing.checks.routed_scaling import check_routed_scaling

from suites.regressions.inject import detects


def _setup(scheme="nvfp4"):
    p = pb.family_problem("deepseek_v3", scheme, T=12)
    return (p,) + pb.setup(p)[:1] + pb.setup(p)[2:]


def test_scaling_once_on_the_routed_output():
    for scheme in ("nvfp4", "w_mxfp4"):
        p, t, cfg, moe = _setup(scheme)
        check_routed_scaling(p, t, cfg, moe)


def test_scaling_applied_twice_is_detected(monkeypatch):
    p, t, cfg, moe = _setup()
    orig = moe.experts.apply
    monkeypatch.setattr(moe.experts, "apply", lambda *a, **k: orig(*a, **k) * p.routed_scaling)
    detects(check_routed_scaling, p, t, cfg, moe, match="the routed scaling applied twice")


def test_scaling_applied_to_the_shared_experts_is_detected(monkeypatch):
    p, t, cfg, moe = _setup()
    orig = moe.shared_experts.apply
    monkeypatch.setattr(moe.shared_experts, "apply", lambda *a, **k: orig(*a, **k) * p.routed_scaling)
    detects(check_routed_scaling, p, t, cfg, moe, match="applied to the shared experts too")
