"""The comparison rules of the value stages (dequantize, qdq) are pinned:
bitwise, so -0 against +0 is a mismatch (the sign of zero counts wherever a
value is compared), and NaN equals NaN (any payload, either sign) and nothing
else. Loosening either rule turns these tests red."""
import math

import pytest
import torch

import harness.formats as hf
from harness.conformance import Implementation, run_conformance
from harness.conformance.compare import _values_equal

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_values_equal_is_bitwise_and_nan_equals_only_nan(dtype):
    a = torch.tensor([0.0, -0.0, NAN, NAN, 1.0, INF, -INF, 0.0, NAN], dtype=dtype)
    b = torch.tensor([-0.0, 0.0, -NAN, 1.0, NAN, INF, -INF, 0.0, 0.0], dtype=dtype)
    assert _values_equal(a, b).tolist() == [False, False, True, False, False, True, True, True, False]


def _run(qdq):
    impl = Implementation(name="rule-probe", version="1", formats=("mxfp4",), scale_modes=("floor",),
                          input_dtypes=("float32",), qdq=qdq)
    return run_conformance([impl], formats=["mxfp4"], random_blocks=8, isolate=False)


def test_an_implementation_dropping_the_sign_of_zero_fails():
    def plus_zero(x, fmt, mode, rounding, gs):
        y = hf.qdq(x, fmt, mode, rounding, gs)
        return torch.where(y == 0, torch.zeros_like(y), y)
    data = _run(plus_zero)
    assert data["failed"]
    st = data["cells"][0]["stages"]["qdq"]
    assert st["unexplained_blocks"] > 0 and "zeros" in st["unexplained_families"]


def test_an_implementation_with_another_nan_payload_passes_and_nan_for_a_number_fails():
    negative_nan_payload_1 = torch.tensor(0xFFC00001 - 2 ** 32, dtype=torch.int32).view(torch.float32)

    def other_nan(x, fmt, mode, rounding, gs):
        y = hf.qdq(x, fmt, mode, rounding, gs)
        assert bool(torch.isnan(y).any())  # the special family reaches NaN
        return torch.where(torch.isnan(y), negative_nan_payload_1, y)
    assert not _run(other_nan)["failed"]

    def nan_for_zero(x, fmt, mode, rounding, gs):
        y = hf.qdq(x, fmt, mode, rounding, gs)
        return torch.where(y == 0, torch.full_like(y, NAN), y)
    data = _run(nan_for_zero)
    assert data["failed"] and data["cells"][0]["stages"]["qdq"]["unexplained_blocks"] > 0
