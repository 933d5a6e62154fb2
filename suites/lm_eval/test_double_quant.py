"""Headline: the eval gates against the double quantization of upstream
PR #42120 -> #46254, injected into the MoE emulation layer of the tiny model.

Findings (measured; docs/lm_eval.md has the figures):
- A second QDQ with the SAME arguments is bit-for-bit a no-op in harness.moe
  for every scheme (NVFP4 with normal-range E4M3 block scales re-derives the
  same scale; MX with a fixed scale mode and per-tensor FP8 are idempotent).
  The literal injection leaves every logit unchanged: no eval gate can or
  should fail on it -- it is a QDQ-count property of the layer's suites.
- The double quantization as it ran upstream -- the second pass made by the
  base class without the calibrated global scale (`a1_scale` is None in
  emulation: the `a1_scale or a1_gscale` half of the fix) -- changes the
  numerics. Accuracy and the KL-vs-bf16 gate hardly move (the extra error is
  small next to NVFP4's own); the KL gate against the float64 reference of
  the scheme (kl_oracle) fails by orders of magnitude.
"""

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.lmeval.config import load
from harness.lmeval.configs import tiny_config_path
from harness.lmeval.evaluate import run_config

from suites.lm_eval import faults

pytestmark = pytest.mark.slow
LIMIT = 30


def _gate(result, gate):
    return next(g for g in result["details"]["gates"] if g["gate"] == gate)


def _run(session, fault=None):
    with faults.FAULTS[fault or "none"]():
        return run_config(load(tiny_config_path("nvfp4")), session=session, limit=LIMIT)


@pytest.fixture(scope="module")
def correct(eval_session):
    return _run(eval_session)


def test_correct_layer_passes_every_gate(correct):
    assert correct["passed"], correct["message"]
    assert {g["gate"] for g in correct["details"]["gates"]} >= {"one_sided", "paired", "kl", "kl_oracle"}


def test_double_qdq_same_scale_is_a_bitwise_no_op(eval_session, correct):
    r = _run(eval_session, "double_qdq_same_scale")
    assert r["details"]["metrics"] == correct["details"]["metrics"]
    for gate in ("kl", "kl_oracle"):
        assert _gate(r, gate)["details"]["mean_kl"] == _gate(correct, gate)["details"]["mean_kl"]
    assert r["passed"]


@pytest.mark.parametrize("fault", ["double_qdq_second_scale_missing", "double_qdq_second_scale_dynamic"])
def test_double_qdq_as_shipped_upstream_fails_the_oracle_kl_gate(eval_session, correct, fault):
    r = _run(eval_session, fault)
    assert not r["passed"], f"{fault} went unnoticed"
    oracle = _gate(r, "kl_oracle")["details"]
    ok = _gate(correct, "kl_oracle")["details"]
    assert not _gate(r, "kl_oracle")["passed"]
    print(f"\n{fault}: kl_oracle {oracle['mean_kl']:.3e} (correct {ok['mean_kl']:.3e}, "
          f"threshold {oracle['threshold']:.1e}); {oracle['certification']['outside']} of "
          f"{oracle['certification']['elements']} block outputs outside their derived tolerance; "
          f"kl vs bf16 {_gate(r, 'kl')['details']['mean_kl']:.5f} (correct "
          f"{_gate(correct, 'kl')['details']['mean_kl']:.5f}); failed: "
          f"{sorted(g['gate'] for g in r['details']['gates'] if not g['passed'])}")
    assert oracle["mean_kl"] > oracle["threshold"] and oracle["certification"]["outside"] > 0
    # the correct layer: every block output certified, so the oracle run IS the emulated run
    assert ok["mean_kl"] == 0.0 and ok["certification"]["outside"] == 0


def test_scale_convention_mixup_fails_accuracy_and_paired_gates(eval_session):
    """A gross fault (activation global scale inverted) is caught by every gate kind."""
    r = _run(eval_session, "act_gscale_reciprocal")
    failed = {g["gate"] for g in r["details"]["gates"] if not g["passed"]}
    assert {"one_sided", "paired", "kl", "kl_oracle"} <= failed, r["message"]
