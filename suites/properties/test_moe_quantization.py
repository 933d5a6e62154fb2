"""Activation quantization properties of the emulated MoE, for every scheme.

* single quantization: moe_kernel_quantize_input runs exactly once per GEMM
  input per forward (a1 over [T, H], a2 over the [T*k, I] pairs), zero times
  for weight-only schemes (counted by wrapping the module attribute the
  experts look up at call time);
* no silent skip: for every scheme that quantizes activations the output
  differs from the same forward with activation QDQ replaced by the identity
  (only on inputs where the float64 reference shows QDQ matters); the
  dispatcher raises on unknown dtype keys and every scheme key quantizes;
* scale sensitivity: multiplying a scale the scheme uses changes the output
  (NVFP4 activation global scales by 3: a power of two cancels exactly in
  QDQ while the E4M3 block scales stay normal, see harness/testing/checks/scale_use.py); a missing
  required scale raises ValueError.
"""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.moe.schemes import SCHEME_NAMES, SCHEMES
from harness.testing.checks import problem as pb
from harness.testing.checks.double_qdq import check_single_quantization
from harness.testing.checks.scale_use import check_scale_sensitivity
from harness.testing.checks.silent_skip import check_dispatcher_keys, check_no_silent_skip
from harness.strategies import moe_problems

ACT_SCHEMES = tuple(n for n in SCHEME_NAMES if SCHEMES[n].act_fmt is not None)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pb.examples(1 / 4)
@given(data=st.data())
def test_single_activation_quantization(scheme, data):
    problem = data.draw(moe_problems(scheme, max_experts=16, max_tokens=64), label="problem")
    check_single_quantization(problem)


@pytest.mark.parametrize("scheme", ACT_SCHEMES)
@pb.examples(1 / 4)
@given(data=st.data())
def test_no_silent_skip_of_activation_quantization(scheme, data):
    problem = data.draw(moe_problems(scheme, max_experts=16, max_tokens=64), label="problem")
    check_no_silent_skip(problem)


def test_dispatcher_quantizes_every_scheme_key_and_rejects_unknown():
    check_dispatcher_keys()


@pytest.mark.parametrize("scheme", ("nvfp4", "w_mxfp4_a_fp8"))
@pb.examples(1 / 4)
@given(data=st.data())
def test_scale_sensitivity(scheme, data):
    problem = data.draw(moe_problems(scheme, max_experts=16, max_tokens=64), label="problem")
    check_scale_sensitivity(problem)
