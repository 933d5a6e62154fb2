"""vLLM #46735: `self.a1_scale or self.a1_gscale` evaluates a tensor's truth
value: a host sync, "operation not permitted when stream is capturing" on
ROCm. Generic check (CPU proxy of the graph-capture check in
test_moe_gpu.py): no Python truthiness / item / data-dependent shape on a
tensor during forward (harness/testing/checks/host_work.no_host_work raises on Tensor.__bool__),
and torch.compile(fullgraph=True) traces the forward without a graph break
(check_dynamo_fullgraph: a tensor's truth value is a graph break)."""
import pytest

import harness.moe.experts as ex

from harness.testing.checks import problem as pb
from harness.testing.checks.host_work import HostWorkInForward, check_dynamo_fullgraph, check_no_host_work_in_forward

from suites.regressions.inject import problem


@pytest.mark.parametrize("scheme,act_scale", [("nvfp4", 1.0), ("w_mxfp4_a_fp8", 1.0), ("w_mxfp4_a_fp8", 0.0)])
def test_scale_selection_does_no_host_sync(scheme, act_scale):
    p = problem(scheme, act_scale=act_scale)
    t, _, _, moe = pb.setup(p)
    check_no_host_work_in_forward(p, moe, t)


@pytest.mark.parametrize("scheme,act_scale", [("w_mxfp4_a_fp8", 1.0), ("nvfp4", 1.0)])
def test_injected_tensor_or_is_detected(scheme, act_scale, monkeypatch):
    # The historical expression, with the operand that is a tensor first.
    if scheme == "nvfp4":
        monkeypatch.setattr(ex.ExpertsBase, "a1_input_scale", lambda self: self.a1_gscale or self.a1_scale)
    else:
        monkeypatch.setattr(ex.ExpertsBase, "a1_input_scale", lambda self: self.a1_scale or self.a1_gscale)
    p = problem(scheme, act_scale=act_scale)
    t, _, _, moe = pb.setup(p)
    with pytest.raises(HostWorkInForward, match="__bool__"):
        check_no_host_work_in_forward(p, moe, t)


def test_injected_tensor_or_breaks_the_graph(monkeypatch):
    monkeypatch.setattr(ex.ExpertsBase, "a1_input_scale", lambda self: self.a1_scale or self.a1_gscale)
    p = problem("w_mxfp4_a_fp8", act_scale=1.0, T=5, E=4)
    check_dynamo_fullgraph(problem("w_mxfp4_a_fp8", act_scale=0.0, T=5, E=4))  # None or None: no tensor bool
    with pytest.raises(AssertionError, match="fullgraph"):
        check_dynamo_fullgraph(p)
