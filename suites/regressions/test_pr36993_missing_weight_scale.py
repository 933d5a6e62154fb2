"""vLLM #36993: on MI300 in emulation mode the OCP MX scheme never created
`weight_scale`, so weight post-processing crashed. Generic check
(check_create_weights_every_scheme): create and post-process the weights of
every scheme x backend with emulation forced."""
import harness.moe as hm
import harness.moe.conversion as conv

from harness.testing.checks.device import check_create_weights_every_scheme

from suites.regressions.inject import detects


def test_every_scheme_and_backend_creates_and_converts_weights():
    check_create_weights_every_scheme()


def test_injected_missing_weight_scale_is_detected(monkeypatch):
    orig = conv.create_moe_weights

    def forgetful(layer, scheme, num_experts, hidden, intermediate, backend, emulation=True, device=None):
        orig(layer, scheme, num_experts, hidden, intermediate, backend, emulation=emulation, device=device)
        s = hm.get_scheme(scheme)
        if emulation and s.weight_fmt is not None and not s.two_level:
            del layer.w13_weight_scale  # the emulation branch "forgot" weight_scale
            del layer.w2_weight_scale
        return layer

    monkeypatch.setattr(conv, "create_moe_weights", forgetful)
    monkeypatch.setattr(hm, "create_moe_weights", forgetful)
    detects(check_create_weights_every_scheme, match="weight_scale")
