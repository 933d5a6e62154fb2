"""`moe-harness run`'s MoE section holds the layer to the library checks the
suites use (harness.testing.checks): it passes the layer as it is and fails
one whose routing weights are off by 1%."""
import pytest

import harness.moe.routing as routing
from harness.commands.run import moe as run_moe

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_section_passes_the_layer_and_names_its_problem():
    r = run_moe.check_scheme("w_mxfp4_a_mxfp4", "unfused", seed=0, device="cpu", index=0)
    assert r["passed"], r
    assert r["details"]["family"] == run_moe.FAMILY_ORDER[0] and 0 <= r["details"]["err_vs_bound"] <= 1
    assert r["details"]["problem"].startswith("MoEProblem(")


def test_the_section_fails_routing_weights_off_by_one_percent(monkeypatch):
    route = routing.route_arch

    def off(*a, **kw):
        w, ids = route(*a, **kw)
        return w * 1.01, ids

    monkeypatch.setattr(routing, "route_arch", off)
    r = run_moe.check_scheme("w_mxfp4_a_mxfp4", "unfused", seed=0, device="cpu", index=0)
    assert not r["passed"] and r["message"], r
