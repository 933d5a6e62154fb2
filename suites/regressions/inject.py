"""Shared helpers of the regression tests: fixed small problems and the
detection assertion. Each regression test injects a historical bug with
monkeypatch and asserts that a GENERIC property check (harness/testing/checks/, the
same function the property suites call) detects it."""
from __future__ import annotations

import pytest

from harness.strategies import MoEProblem


def problem(scheme: str, **kw) -> MoEProblem:
    """A small deterministic problem (E=6, k=2, H=64, I=32, T=12)."""
    base = dict(E=6, top_k=2, H=64, I=32, T=12, seed=7, scoring="softmax", renormalize=True, activation="silu",
                logits="grid", spread=2, ckpt="modelopt" if scheme == "nvfp4" else "native", act_scale=1.0)
    base.update(kw)
    return MoEProblem(scheme, **base)


def detects(check, *args, match=None, **kw):
    """The check must raise AssertionError (optionally matching `match`)."""
    with pytest.raises(AssertionError, match=match) as info:
        check(*args, **kw)
    return str(info.value)


__all__ = ["problem", "detects"]
