"""vLLM #35733: NVFP4 emulation dequantized checkpoint weights with a division
where a multiplication by the global scale belonged (a convention mix-up
inside the emulation itself, not the loader). Generic check: the float64
reference dequantizes independently (harness.formats), so a reciprocal
mistake changes the output by orders of magnitude (check_matches_reference),
for checkpoints in each convention."""
import pytest

import harness.moe.ops as ops

from harness.testing.checks.oracle import check_matches_reference

from suites.regressions.inject import detects, problem


@pytest.mark.parametrize("ckpt", ("modelopt", "compressed_tensors"))
def test_nvfp4_emulation_matches_reference_both_conventions(ckpt):
    check_matches_reference(problem("nvfp4", ckpt=ckpt))


@pytest.mark.parametrize("ckpt", ("modelopt", "compressed_tensors"))
def test_injected_division_by_decode_scale_is_detected(ckpt, monkeypatch):
    orig = ops.dequantize_expert_weights

    def wrong_direction(q, gscale, **kw):
        # value = code * s * gs instead of code * s / gs
        return orig(q, None if gscale is None else 1.0 / gscale, **kw)

    monkeypatch.setattr(ops, "dequantize_expert_weights", wrong_direction)
    detects(check_matches_reference, problem("nvfp4", ckpt=ckpt), match="outside tolerance")
