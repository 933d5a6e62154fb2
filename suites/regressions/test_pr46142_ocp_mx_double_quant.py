"""vLLM #46142: the OCP MX emulation experts had the same double
quantization as #46254, and on MI300 a backend that does not quantize its
inputs was picked (missing quantization). MX QDQ with one scale mode IS
idempotent, so the double QDQ is numerically invisible: only counting calls
sees it (check_single_quantization). The missing quantization is seen by the
count, by the no-silent-skip check and by the reference."""
import pytest

import harness.moe.experts as ex

from harness.testing.checks.double_qdq import check_single_quantization
from harness.testing.checks.oracle import check_matches_reference

from suites.regressions.inject import detects, problem

MX_ACT = ("w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_fp8")


def _double_quantizing_apply(self, hidden, topk_weights, topk_ids, *, activation="silu"):
    x = self.quantize_activation(hidden.float(), self.a1_input_scale()).to(hidden.dtype)
    return ex.ExpertsBase.apply(self, x, topk_weights, topk_ids, activation=activation)


@pytest.mark.parametrize("scheme", MX_ACT)
def test_ocp_mx_quantizes_once(scheme):
    check_single_quantization(problem(scheme))
    check_matches_reference(problem(scheme))


@pytest.mark.parametrize("scheme", MX_ACT)
def test_injected_double_quantization_is_detected(scheme, monkeypatch):
    monkeypatch.setattr(ex.OcpMxEmulationExperts, "apply", _double_quantizing_apply)
    detects(check_single_quantization, problem(scheme), match="expected 2 activation QDQ calls")


@pytest.mark.parametrize("scheme", MX_ACT)
def test_injected_missing_input_quantization_is_detected(scheme, monkeypatch):
    # A backend that "does not do input quantization": neither the prepare step
    # nor the experts quantize a1.
    monkeypatch.setattr(ex.OcpMxEmulationExperts, "expects_unquantized_inputs", False)
    import harness.moe.layer as layer


    def forward_without_prepare_qdq(self, hidden, router_logits):
        topk_weights, topk_ids = layer.routing.route(router_logits, self.top_k, scoring=self.scoring,
                                                     renormalize=self.renormalize)
        return self.experts.apply(hidden, topk_weights, topk_ids, activation=self.activation)

    monkeypatch.setattr(layer.FusedMoE, "forward", forward_without_prepare_qdq)
    p = problem(scheme)
    detects(check_single_quantization, p, match="expected 2 activation QDQ calls")
    detects(check_matches_reference, p, match="outside tolerance")
