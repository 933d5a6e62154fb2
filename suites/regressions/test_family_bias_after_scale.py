"""gpt-oss expert biases: float biases are added to the FULLY scaled GEMM
result. A fused kernel that adds the bias to its accumulator before the
post-GEMM scale (for two-level weights the 1 / per-expert global scale)
multiplies the bias by that scale. Generic check: check_bias_after_scale (the
layer's own GEMM inputs and outputs, its trace seam), and the oracle."""
import harness.moe.experts as ex
from harness.testing.checks import problem as pb
from harness.testing.checks.bias_placement import check_bias_after_scale
from harness.testing.checks.oracle import check_matches_reference

from suites.regressions.inject import detects


def _problem(scheme="nvfp4"):
    return pb.family_problem("gpt_oss", scheme, T=12)


def test_bias_after_the_scale():
    for s in ("nvfp4", "w_mxfp4", "w_mxfp4_a_mxfp4"):
        check_bias_after_scale(_problem(s))


def test_bias_before_the_global_scale_is_detected(monkeypatch):
    p = _problem()
    t, _, cfg, moe = pb.setup(p)
    orig = ex._add_bias
    gs = {cfg.w13_bias.shape[1]: cfg.w13_gscale, cfg.w2_bias.shape[1]: cfg.w2_gscale}

    def before_scale(h, bias, ids):  # the bias went through the kernel's 1 / global-scale epilogue
        return orig(h, None if bias is None else bias / gs[bias.shape[1]].reshape(-1, 1), ids)

    monkeypatch.setattr(ex, "_add_bias", before_scale)
    detects(check_bias_after_scale, p, t, cfg, moe, match="bias was added before the dequantized GEMM's scale")
    detects(check_matches_reference, p, t, cfg, moe, match="outside tolerance")
