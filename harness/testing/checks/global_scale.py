"""Global-scale direction: NVFP4 checkpoints store the per-tensor scale
decode-side (ModelOpt, amax/2688) or encode-side (compressed-tensors,
2688/amax); loading either must give the truth's weights and activation
scales."""
from __future__ import annotations

from harness.moe import reference as ref

from harness.testing.checks.problem import U, load_config, truth_of


def check_checkpoint_conventions(problem, t=None):
    """Loading the problem's weights in either NVFP4 convention (ModelOpt
    decode-side, compressed-tensors encode-side) yields the truth's dequantized
    weights and activation global scales (up to the float32 reciprocal: 4u)."""
    if t is None:
        t = problem.tensors()
    truth = truth_of(problem, t)
    scheme = ref.resolve_scheme(problem.scheme)
    convs = ("modelopt", "compressed_tensors") if scheme.two_level else ("native",)
    want13 = ref.dequant_weight(truth.w13_q, truth.w13_gscale, scheme, "w13")
    want2 = ref.dequant_weight(truth.w2_q, truth.w2_gscale, scheme, "w2")
    for conv in convs:
        p = problem.replace(ckpt=conv) if scheme.two_level else problem
        cfg = load_config(p, t, truth)
        got13 = ref.dequant_weight(cfg.w13_q, cfg.w13_gscale, scheme, "w13")
        got2 = ref.dequant_weight(cfg.w2_q, cfg.w2_gscale, scheme, "w2")
        for what, got, want in (("w13", got13, want13), ("w2", got2, want2)):
            bad = ~((got - want).abs() <= 4 * U * want.abs())
            assert not bool(bad.any()), (
                f"{conv}: dequantized {what} differs from the truth at {int(bad.sum())} elements, e.g. "
                f"{got[bad][:3].tolist()} vs {want[bad][:3].tolist()}")
        for name in ("a1_gscale", "a2_gscale"):
            tv = getattr(truth, name)
            if tv is None:
                continue
            v = getattr(cfg, name)
            assert v is not None, f"{conv}: loader dropped {name}"
            rel = abs(float(v) / float(tv) - 1)
            assert rel <= 4 * U, f"{conv}: {name} = {float(v)} but the truth is {float(tv)} (one max over experts, encode side)"
    return {}
