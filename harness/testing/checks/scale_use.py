"""Ignored or defaulted scales (vLLM #46254 scale attribute, #35733): changing
a scale the scheme uses changes the output; a missing required scale raises."""
from __future__ import annotations

import dataclasses

import torch

from harness.moe import reference as ref

from harness.testing.checks.problem import extras_of, make_moe, reference_trace, run, setup


def check_scale_sensitivity(problem, t=None, cfg=None):
    """Changing a scale the scheme uses changes the output; a missing required
    scale raises. NVFP4 activation global scales are multiplied by 3, not 2:
    QDQ(x; 2 gs) == QDQ(x; gs) whenever the E4M3 block scales stay normal
    (scaling an E4M3 value by 2 is exact and cancels in s/gs), so doubling
    is the wrong probe. Weight global scales are dequantize-only: doubling
    halves the weights."""
    if t is None:
        t, _, cfg, _ = setup(problem)
    scheme = ref.resolve_scheme(problem.scheme)
    if problem.T == 0:
        return {"skipped": True}
    base = run(make_moe(problem, cfg), t)
    probes = []
    if scheme.two_level:
        probes = [("a1_gscale", 3.0), ("a2_gscale", 3.0), ("w13_gscale", 2.0), ("w2_gscale", 2.0)]
    elif scheme.act_per_tensor and cfg.a1_scale is not None:
        probes = [("a1_scale", 3.0), ("a2_scale", 3.0)]
    changed = {}
    extras = extras_of(problem, t)
    trace0 = reference_trace(problem, t, cfg, extras)
    for name, f in probes:
        v = getattr(cfg, name)
        cfg2 = dataclasses.replace(cfg, **{name: v * f})
        out2 = run(make_moe(problem, cfg2, extras=extras), t)
        trace = reference_trace(problem, t, cfg2, extras)
        if torch.equal(trace.out, trace0.out):
            continue  # the reference itself is insensitive here (e.g. saturation)
        assert not torch.equal(out2, base), f"{scheme.name}: output unchanged after {name} x{f}: the layer ignores {name}"
        changed[name] = True
    # The shared MLP's own scales (its config, not the experts').
    scfg = extras.shared_cfg
    for name, f in (probes if scfg is not None and (scfg.a1_scale is not None or scheme.two_level) else []):
        ex2 = dataclasses.replace(extras, shared_cfg=dataclasses.replace(scfg, **{name: getattr(scfg, name) * f}))
        out2 = run(make_moe(problem, cfg, extras=ex2), t)
        if torch.equal(reference_trace(problem, t, cfg, ex2).out, trace0.out):
            continue
        assert not torch.equal(out2, base), (f"{scheme.name}: output unchanged after the shared MLP's {name} x{f}: "
                                             f"the shared experts ignore their own {name}")
        changed["shared " + name] = True
    # Missing required scales.
    required = ["a1_gscale", "a2_gscale"] if scheme.needs_act_gscale else []
    for name in required:
        cfg3 = dataclasses.replace(cfg, **{name: None})
        try:
            run(make_moe(problem, cfg3), t)
        except ValueError:
            continue
        raise AssertionError(f"{scheme.name}: {name}=None did not raise (a missing scale must never default to 1.0)")
    if scheme.two_level:
        for name in ("w13_gscale", "w2_gscale"):
            try:
                run(make_moe(problem, dataclasses.replace(cfg, **{name: None})), t)
            except ValueError:
                continue
            raise AssertionError(f"{scheme.name}: {name}=None did not raise (a missing scale must never default to 1.0)")
    return {"changed": changed}
