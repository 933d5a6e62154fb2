"""Headline: the eval gates against the double quantization of upstream
PR #42120 -> #46254, injected into the MoE emulation layer of the tiny model.

Finding (measured, see docs/lm_eval.md): a second QDQ with the SAME arguments
is bit-for-bit a no-op for every scheme of harness.moe (NVFP4 with normal-range
E4M3 block scales, MX with a fixed scale mode and per-tensor FP8 are all
idempotent), so the literal injection leaves every logit unchanged: no eval
gate can or should fail on it -- it is a QDQ-count property (harness.moe
suites), not an accuracy one. The double quantization as it ran upstream --
the second pass made by the base class without the calibrated global scale
(`a1_scale` None: the `a1_scale or a1_gscale` half of the fix) -- changes the
numerics, and the KL gate catches it while accuracy alone does not.
"""

import pytest

from harness.lmeval.config import load
from harness.lmeval.evaluate import run_config, tiny_config_path

from . import faults

LIMIT = 100


def _gates(result):
    return {g["gate"] + ":" + g["name"]: g for g in result["details"]["gates"]}


def _kl(result):
    return next(g["details"]["mean_kl"] for g in result["details"]["gates"] if g["gate"] == "kl")


@pytest.fixture(scope="module")
def correct(eval_session):
    return run_config(load(tiny_config_path("nvfp4")), session=eval_session, limit=LIMIT)


def test_correct_layer_passes_every_gate(correct):
    assert correct["passed"], correct["message"]


def test_double_qdq_same_scale_is_a_bitwise_no_op(eval_session, correct):
    with faults.double_qdq_same_scale():
        r = run_config(load(tiny_config_path("nvfp4")), session=eval_session, limit=LIMIT)
    assert _kl(r) == _kl(correct)
    assert r["details"]["metrics"] == correct["details"]["metrics"]
    assert r["passed"]


def test_double_qdq_as_shipped_upstream_fails_the_kl_gate(eval_session, correct):
    with faults.double_qdq_second_scale_missing():
        r = run_config(load(tiny_config_path("nvfp4")), session=eval_session, limit=LIMIT)
    assert not r["passed"], "the double quantization went unnoticed"
    gates = _gates(r)
    kl = gates["kl:tiny_add_rolling:kl"]
    assert not kl["passed"]
    ratio = kl["details"]["mean_kl"] / _kl(correct)
    print(f"double QDQ (2nd pass without calibrated gs): KL {kl['details']['mean_kl']:.5f} vs correct "
          f"{_kl(correct):.5f} (x{ratio:.3f}); threshold {kl['details']['threshold']}")
    assert ratio > 1.1


def test_scale_convention_mixup_fails_accuracy_and_paired_gates(eval_session):
    """A gross fault (activation global scale inverted) is caught by every gate kind."""
    with faults.act_gscale_reciprocal():
        r = run_config(load(tiny_config_path("nvfp4")), session=eval_session, limit=LIMIT)
    failed = {g["gate"] for g in r["details"]["gates"] if not g["passed"]}
    assert {"one_sided", "paired", "kl"} <= failed, r["message"]
