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


# --------------------------------------------------------------------------- pinned arithmetic
# Exact hand-computed values on small fixed inputs (binary fractions, so every
# bound is exact in float64): a gate that computed a two-sided interval where a
# one-sided one is specified, or applied rtol as an absolute margin, fails here.

def test_one_sided_rtol_is_relative_higher_is_better():
    # value 0.75, rtol 0.125: bound 0.75 * 0.875 = 0.65625 (absolute would be 0.625)
    g = gates.one_sided("t", "acc,none", 0.65625, 0.75, 0.125)
    assert g.passed and g.details["bound"] == 0.65625 and g.details["margin"] == 0.0
    assert not gates.one_sided("t", "acc,none", 0.640625, 0.75, 0.125).passed   # between 0.625 and 0.65625


def test_one_sided_rtol_is_relative_lower_is_better():
    # bits_per_byte: value 2.0, rtol 0.125: bound 2.25 (absolute would be 2.125)
    g = gates.one_sided("t", "bits_per_byte,none", 2.1875, 2.0, 0.125)
    assert g.passed and g.details["bound"] == 2.25 and g.details["margin"] == 0.0625
    assert not gates.one_sided("t", "bits_per_byte,none", 2.3125, 2.0, 0.125).passed
    assert gates.one_sided("t", "word_perplexity,none", 2.25, 2.0, 0.125).passed          # bound inclusive


def test_mcnemar_pinned_values():
    assert gates.mcnemar_one_sided_p(5, 1) == 7 / 64          # (C(6,5) + C(6,6)) / 2^6
    assert gates.mcnemar_one_sided_p(8, 1) == 10 / 512        # (C(9,8) + C(9,9)) / 2^9
    assert gates.mcnemar_one_sided_p(0, 4) == 1.0             # P(X >= 0)
    assert gates.mcnemar_one_sided_p(1, 1) == 3 / 4           # (C(2,1) + C(2,2)) / 4


def _binomial_cdf(k: int, n: int) -> float:
    return sum(math.comb(n, j) for j in range(k + 1)) / 2.0 ** n


def test_bootstrap_bound_is_one_sided_at_the_stated_confidence():
    """40 items, 20 of them dropped: a resample's drop is X/40, X ~ Bin(40, 1/2)
    exactly. The one-sided 95% lower bound is the 5% quantile: P(X <= 14) =
    0.0403 < 0.05 <= P(X <= 15) = 0.0769, so 15/40. A two-sided 95% interval
    would take the 2.5% quantile, 14/40 (P(X <= 13) = 0.0192). The upper end
    is the 95% quantile, 25/40 by symmetry."""
    assert _binomial_cdf(14, 40) < 0.05 <= _binomial_cdf(15, 40)
    assert _binomial_cdf(13, 40) < 0.025 <= _binomial_cdf(14, 40)
    base = np.ones(40)
    scheme = np.r_[np.zeros(20), np.ones(20)]
    lo, hi = gates.bootstrap_drop_bounds(base, scheme, 0.95, 20000, seed=0)
    assert (lo, hi) == (15 / 40, 25 / 40)
    # the gate fails iff that one-sided bound exceeds the allowance
    assert not gates.paired("t", "acc,none", base, scheme, allowance=0.36, resamples=20000).passed
    assert gates.paired("t", "acc,none", base, scheme, allowance=0.375, resamples=20000).passed


def test_paired_mcnemar_method_rule():
    # 9 discordant pairs, 8 against the scheme, 31 concordant: drop 7/40, p = 10/512 < 0.05
    base = np.r_[np.ones(8), np.zeros(1), np.ones(31)]
    scheme = np.r_[np.zeros(8), np.ones(1), np.ones(31)]
    g = gates.paired("t", "acc,none", base, scheme, allowance=0.17, method="mcnemar")
    assert g.details["drop"] == 7 / 40 and g.details["mcnemar_p_one_sided"] == 10 / 512
    assert not g.passed                                        # 0.175 > 0.17 and p < 0.05
    assert gates.paired("t", "acc,none", base, scheme, allowance=0.175, method="mcnemar").passed
    assert gates.paired("t", "acc,none", base, scheme, allowance=0.0, method="mcnemar", confidence=0.99).passed


def test_kl_gate_boundary_and_zero_threshold():
    assert gates.kl_gate("r", 0.25, 0.25, 10).passed                      # <= is inclusive
    assert not gates.kl_gate("r", 0.25 + 2 ** -40, 0.25, 10).passed
    z = gates.kl_gate("r", 0.0, 0.0, 10)
    assert z.passed and z.details["ratio_to_threshold"] == 0.0
    assert not gates.kl_gate("r", 1e-300, 0.0, 10).passed


class _FixedLM:
    """Two 'schemes' with fixed next-token distributions over a 2-token vocab."""

    def __init__(self, dists):
        import torch

        self.dists = {k: torch.tensor(v, dtype=torch.float64).log() for k, v in dists.items()}
        self.scheme = "a"
        self.model = type("M", (), {"config": type("C", (), {"vocab_size": 2})()})()

    def rolling_windows(self, text):
        toks = [int(c) for c in text]
        return [([toks[0]], toks[1:])]

    def set_scheme(self, s):
        self.scheme = s

    def logprobs(self, rows):
        return [self.dists[self.scheme].expand(len(r), 2).clone() for r in rows]


def test_mean_token_kl_pinned():
    """KL(P || Q), P = (1/2, 1/2), Q = (1/4, 3/4): (1/2) ln 2 + (1/2) ln (2/3) = (1/2) ln (4/3)."""
    from harness.lmeval.kl import mean_token_kl

    lm = _FixedLM({"base": [0.5, 0.5], "q": [0.25, 0.75]})
    out = mean_token_kl(lm, ["0101", "110"], "base", "q", batch_docs=1, disable_tqdm=True)
    assert out["n_tokens"] == 5 and out["n_docs"] == 2
    assert out["mean_kl"] == pytest.approx(0.5 * math.log(4 / 3), rel=1e-15, abs=0)
    assert lm.scheme == "a"                                   # the previous scheme is restored
