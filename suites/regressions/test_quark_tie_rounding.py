"""Rounding divergence: AMD Quark's Triton E2M1 conversion rounds ties away
from zero, its CUDA kernel and the spec round half to even. Generic check
(check_activation_qdq_ties): on exact tie inputs (k + 1/2 code steps, block
scale pinned by a max_normal anchor) the layer's activation QDQ equals the
spec's RNE result bit for bit, for every op backend available; and the MoE
output matches the float64 reference on tie-heavy inputs."""
import pytest

import harness.moe.ops as ops
from harness.moe.schemes import SCHEME_NAMES, SCHEMES

from harness.testing.checks.ties import check_activation_qdq_ties

from suites.regressions.inject import detects

TIE_SCHEMES = tuple(n for n in SCHEME_NAMES if SCHEMES[n].act_fmt not in (None, "fp8"))


@pytest.mark.parametrize("scheme", TIE_SCHEMES)
def test_activation_qdq_rounds_ties_to_even(scheme):
    check_activation_qdq_ties(scheme, backends=("torch", "auto"))


@pytest.mark.parametrize("scheme", TIE_SCHEMES)
def test_injected_ties_away_is_detected(scheme, monkeypatch):
    orig = ops.qdq

    def away(x, fmt, *, rounding="rne", **kw):
        return orig(x, fmt, rounding="away", **kw)

    monkeypatch.setattr(ops, "qdq", away)
    detects(check_activation_qdq_ties, scheme, match="differ")
