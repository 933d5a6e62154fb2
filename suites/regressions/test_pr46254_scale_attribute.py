"""vLLM #46254 (seed 001), review: in emulation a1_scale is None and the NVFP4
global scale lives in a1_gscale; the base class passed self.a1_scale (fix:
fall back to a1_gscale) and the dispatcher gained `assert A_scale is not None`.
Generic checks (check_scale_sensitivity): changing the true global scale
changes the output; a None scale where one is required raises, never a
silent 1.0. Plus the float64 reference (check_matches_reference)."""
import torch

import harness.moe.experts as ex
import harness.moe.quantize_input as qi

from harness.testing.checks.oracle import check_matches_reference
from harness.testing.checks.scale_use import check_scale_sensitivity

from suites.regressions.inject import detects, problem


def test_nvfp4_scales_are_used_and_required():
    p = problem("nvfp4")
    res = check_scale_sensitivity(p)
    assert set(res["changed"]) == {"a1_gscale", "a2_gscale", "w13_gscale", "w2_gscale"}


def test_injected_wrong_scale_attribute_is_detected(monkeypatch):
    # The base class reads a1_scale (None in emulation) and the quantizer
    # silently uses 1.0 for it.
    monkeypatch.setattr(ex.ExpertsBase, "a1_input_scale",
                        lambda self: self.a1_scale if self.a1_scale is not None else torch.ones(()))
    p = problem("nvfp4")
    detects(check_scale_sensitivity, p, match="a1_gscale")
    detects(check_matches_reference, p, match="outside tolerance")


def test_injected_missing_none_check_is_detected(monkeypatch):
    # The dispatcher without `assert A_scale is not None`: None becomes 1.0.
    orig = qi.moe_kernel_quantize_input

    def no_assert(A, A_scale, quant_dtype, *a, **k):
        if quant_dtype == "nvfp4" and A_scale is None:
            A_scale = torch.ones((), device=A.device)
        return orig(A, A_scale, quant_dtype, *a, **k)

    monkeypatch.setattr(qi, "moe_kernel_quantize_input", no_assert)
    detects(check_scale_sensitivity, problem("nvfp4"), match="did not raise")
