"""Scheme rows whose activation format differs from their weight format
(w_mxfp4_a_fp8, w_mxfp4_a_mxfp6_*, and the weight-only W4A16 w_mxfp4 /
W8A16 w_mxfp8): a layer that takes the activation format from the weight row
passes the rows whose formats agree and must fail these. Generic check:
check_activation_format (dispatch key and bitwise QDQ of the layer's own
QDQ inputs with the row's activation format)."""
import pytest

import harness.moe.experts as ex
from harness.moe.schemes import SCHEMES
from harness.testing.checks.act_format import check_activation_format
from harness.testing.checks import problem as pb

from suites.regressions.inject import detects, problem

DIFFER = tuple(n for n, s in SCHEMES.items() if s.act_fmt != s.weight_fmt)
AGREE = tuple(n for n in SCHEMES if n not in DIFFER)


def _p(scheme):
    return problem(scheme, act_scale=0.0 if scheme == "w_mxfp4_a_fp8" else 1.0)


@pytest.mark.parametrize("scheme", tuple(SCHEMES))
def test_activations_in_the_rows_format(scheme):
    check_activation_format(_p(scheme))
    check_activation_format(pb.family_problem("llama4", scheme, T=12))  # the weighted input too


def test_formats_taken_from_the_weight_row_are_detected(monkeypatch):
    assert {"w_mxfp4_a_fp8", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_mxfp6_e2m3", "w_mxfp4"} <= set(DIFFER)
    monkeypatch.setattr(ex.ExpertsBase, "quant_dtype", property(lambda self: self.scheme.weight_fmt))
    for scheme in DIFFER:
        detects(check_activation_format, _p(scheme))
    for scheme in AGREE:  # the fault is invisible where the two formats agree: why each row needs its own test
        check_activation_format(_p(scheme))
