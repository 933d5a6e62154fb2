"""Each gate passes on its good case and is shown able to fail."""

import math

import numpy as np
import pytest

from harness.lmeval import gates


def test_one_sided_vllm_rule():
    ok = gates.one_sided("t", "acc,none", 0.93, 0.95, 0.05)
    assert ok.passed and ok.details["bound"] == pytest.approx(0.9025)
    bad = gates.one_sided("t", "acc,none", 0.90, 0.95, 0.05)
    assert not bad.passed and bad.details["margin"] < 0


def test_one_sided_lower_is_better_and_missing():
    assert gates.one_sided("t", "bits_per_byte,none", 2.0, 2.0, 0.05).passed
    assert not gates.one_sided("t", "bits_per_byte,none", 2.2, 2.0, 0.05).passed
    assert not gates.one_sided("t", "acc,none", None, 0.9, 0.05).passed
    skipped = gates.one_sided("t", "acc,none", 0.1, None, 0.05)
    assert skipped.passed and skipped.skipped


def test_mcnemar_exact_values():
    # b=5, c=0: P(X>=5 | Bin(5, .5)) = 1/32
    assert gates.mcnemar_one_sided_p(5, 0) == pytest.approx(1 / 32)
    assert gates.mcnemar_one_sided_p(0, 0) == 1.0
    assert gates.mcnemar_one_sided_p(3, 3) == pytest.approx(sum(math.comb(6, k) for k in range(3, 7)) / 64)


def _pair(n, base_acc, flips_down, flips_up, seed=0):
    rng = np.random.default_rng(seed)
    base = (rng.random(n) < base_acc).astype(float)
    scheme = base.copy()
    right = np.flatnonzero(base == 1)
    wrong = np.flatnonzero(base == 0)
    scheme[right[:flips_down]] = 0
    scheme[wrong[:flips_up]] = 1
    return base, scheme


def test_paired_passes_within_allowance_and_on_noise():
    base, scheme = _pair(600, 0.97, 6, 4)        # drop 2/600: noise
    g = gates.paired("t", "acc,none", base, scheme, allowance=0.02, seed=1)
    assert g.passed, g.details
    assert g.details["discordant_base_only"] == 6 and g.details["discordant_scheme_only"] == 4


def test_paired_fails_on_supported_drop_beyond_allowance():
    base, scheme = _pair(600, 0.97, 60, 0)       # drop 10%
    g = gates.paired("t", "acc,none", base, scheme, allowance=0.02, seed=1)
    assert not g.passed and g.details["drop_ci_low"] > 0.02
    m = gates.paired("t", "acc,none", base, scheme, allowance=0.02, method="mcnemar")
    assert not m.passed and m.details["mcnemar_p_one_sided"] < 1e-9


def test_paired_does_not_fail_on_drop_without_statistical_support():
    base, scheme = _pair(40, 0.9, 2, 0)          # drop 5% on 40 items: not significant
    g = gates.paired("t", "acc,none", base, scheme, allowance=0.0, seed=1)
    assert g.passed and g.details["drop"] == pytest.approx(0.05)


def test_paired_is_seeded():
    base, scheme = _pair(300, 0.9, 15, 5)
    a = gates.paired("t", "acc,none", base, scheme, allowance=0.0, seed=7).details
    b = gates.paired("t", "acc,none", base, scheme, allowance=0.0, seed=7).details
    assert (a["drop_ci_low"], a["drop_ci_high"]) == (b["drop_ci_low"], b["drop_ci_high"])


def test_paired_refuses_misaligned_items():
    assert not gates.paired("t", "acc,none", [1, 0], [1], allowance=0.1).passed


def test_kl_gate():
    assert gates.kl_gate("r", 0.01, 0.02, 100).passed
    bad = gates.kl_gate("r", 0.03, 0.02, 100)
    assert not bad.passed and bad.details["ratio_to_threshold"] == pytest.approx(1.5)
