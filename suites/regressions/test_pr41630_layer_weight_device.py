"""vLLM #41630 (seed 000): the EMULATION branch of
convert_to_nvfp4_moe_kernel_format read `layer.weight.device`; a FusedMoE
layer has only w13/w2, so selecting emulation crashed at startup.
Generic check: every backend branch of every kernel-format conversion runs
with a minimal layer object (only the MoE attributes) and keeps its outputs
on w13's device (harness/testing/checks/device.check_conversion_every_backend)."""
import harness.moe as hm
import harness.moe.conversion as conv

from harness.testing.checks.device import check_conversion_every_backend

from suites.regressions.inject import detects


def test_every_backend_converts_a_layer_without_weight():
    res = check_conversion_every_backend()
    assert {b for _, b in res["ran"]} == set(hm.MoEBackend)


def test_injected_layer_weight_device_is_detected(monkeypatch):
    orig = conv.convert_to_nvfp4_moe_kernel_format

    def buggy(layer, w13, *args):
        backend = hm.MoEBackend.parse(args[-1])
        if backend == hm.MoEBackend.EMULATION:
            layer.weight.device  # the historical typo (should be w13.device)
        return orig(layer, w13, *args)

    monkeypatch.setattr(conv, "convert_to_nvfp4_moe_kernel_format", buggy)
    monkeypatch.setattr(hm, "convert_to_nvfp4_moe_kernel_format", buggy)
    detects(check_conversion_every_backend, match="EMULATION.*weight")
