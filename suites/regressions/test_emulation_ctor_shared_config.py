"""vLLM emulation experts: the constructor moved the weight scales out of the
shared quant config (`quant_config._w1.scale = None`), so a second experts
object built from the same config lost its scales. Generic check
(check_shared_config): two experts objects from one config give identical
outputs, and the config is untouched."""
import copy

import pytest

import harness.moe.experts as ex

from harness.testing.checks.shared_config import check_shared_config

from suites.regressions.inject import detects, problem

SCHEMES = ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_two_experts_from_one_config(scheme):
    check_shared_config(problem(scheme))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_injected_constructor_side_effect_is_detected(scheme, monkeypatch):
    orig_init = ex.ExpertsBase.__init__

    def stealing_init(self, quant_config, **kw):
        orig_init(self, quant_config, **kw)
        if quant_config is None:
            return
        # Keep a private copy of the weight scales and clear them in the SHARED config.
        own = copy.copy(quant_config)
        own.w13_q = copy.copy(quant_config.w13_q)
        self.quant_config = own
        if quant_config.w13_gscale is not None:
            quant_config.w13_gscale = None
        else:
            quant_config.w13_q.scales = quant_config.w13_q.scales.new_zeros(quant_config.w13_q.scales.shape)

    monkeypatch.setattr(ex.ExpertsBase, "__init__", stealing_init)
    detects(check_shared_config, problem(scheme))
