"""Experts that mutate the shared quant config (emulation constructor bug): two
experts objects built from one config agree and leave it untouched."""
from __future__ import annotations

import dataclasses

import torch

import harness.formats as hf

from harness.testing.checks.bitwise import assert_bitwise_equal
from harness.testing.checks.problem import load_config, make_moe, run


def _snapshot(obj):
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, hf.QuantizedTensor):
            out[f.name] = (id(v), {k: (id(x), x.clone()) if isinstance(x, torch.Tensor) else (id(x), x)
                                   for k, x in vars(v).items()})
        elif isinstance(v, torch.Tensor):
            out[f.name] = (id(v), v.clone())
        else:
            out[f.name] = (id(v), v)
    return out


def _same_snapshot(a, b) -> list:
    diffs = []
    for k in a:
        ia, va = a[k]
        ib, vb = b[k]
        if ia != ib:
            diffs.append(k)
        elif isinstance(va, dict):
            for kk in va:
                (i1, x1), (i2, x2) = va[kk], vb[kk]
                if i1 != i2 or (isinstance(x1, torch.Tensor) and not torch.equal(x1, x2)):
                    diffs.append(f"{k}.{kk}")
        elif isinstance(va, torch.Tensor) and not torch.equal(va, vb):
            diffs.append(k)
    return diffs


def check_shared_config(problem, t=None, cfg=None):
    """Two experts objects built from one config give identical outputs, and
    building them leaves the config untouched."""
    if t is None:
        t = problem.tensors()
        cfg = load_config(problem, t)
    before = _snapshot(cfg)
    try:
        o1 = run(make_moe(problem, cfg), t)
        o2 = run(make_moe(problem, cfg), t)
    except Exception as exc:
        raise AssertionError(f"a second experts object built from the same config fails: {type(exc).__name__}: {exc}") from exc
    diffs = _same_snapshot(before, _snapshot(cfg))
    assert not diffs, f"building experts modified the shared quant config: {diffs}"
    assert_bitwise_equal(o2, o1, "second experts object built from the same config")
    return {}
