"""vLLM #52704: the activation dtype string "mxfp6" was not a dispatch key,
and the dispatcher fell through to "no quantization": activation QDQ was
silently skipped. Generic checks: for every scheme that quantizes
activations, the output differs from the same forward with QDQ disabled
(check_no_silent_skip); the dispatcher raises on unknown keys and every
scheme key quantizes (check_dispatcher_keys); the float64 reference."""
import dataclasses

import pytest

import harness.moe.quantize_input as qi
import harness.moe.schemes as schemes

from harness.testing.checks.oracle import check_matches_reference
from harness.testing.checks.silent_skip import check_dispatcher_keys, check_no_silent_skip

from suites.regressions.inject import detects, problem


def test_dispatcher_keys_and_no_skip():
    check_dispatcher_keys()
    check_no_silent_skip(problem("w_mxfp4_a_mxfp6_e3m2"))


def _fall_through_dispatcher(monkeypatch):
    orig = qi.moe_kernel_quantize_input

    def buggy(A, A_scale, quant_dtype, *a, **k):
        if quant_dtype not in qi.QUANT_DTYPES:
            return A, None  # the historical fall-through to "no quantization"
        return orig(A, A_scale, quant_dtype, *a, **k)

    monkeypatch.setattr(qi, "moe_kernel_quantize_input", buggy)


@pytest.mark.parametrize("scheme", ("w_mxfp4_a_mxfp6_e3m2", "w_mxfp6_e2m3_a_mxfp6_e2m3"))
def test_injected_unknown_key_silent_skip_is_detected(scheme, monkeypatch):
    _fall_through_dispatcher(monkeypatch)
    # The scheme names its activation dtype "mxfp6", which is not a dispatch key.
    monkeypatch.setitem(schemes.SCHEMES, scheme, dataclasses.replace(schemes.SCHEMES[scheme], quant_dtype="mxfp6"))
    p = problem(scheme)
    detects(check_no_silent_skip, p, match="skipped")
    detects(check_dispatcher_keys, match="left the activations unquantized|accepted unknown")
    detects(check_matches_reference, p, match="outside tolerance")
