"""Accuracy gates. Each returns a GateResult with every number it used, so a
report can show why it passed or failed.

(a) one_sided: vLLM's check, measured >= value * (1 - rtol) for a
    higher-is-better metric (lower-is-better metrics such as perplexity:
    measured <= value * (1 + rtol)).
(b) paired: the same items scored by the baseline and by the scheme. The
    accuracy drop d = (b - c) / n, b = items the baseline gets right and the
    scheme wrong, c = the reverse. It fails only on a statistically supported
    drop beyond the allowance: the one-sided lower confidence bound of d
    (paired bootstrap over items, seeded) must exceed `allowance`. The exact
    McNemar p-value (one-sided, H0: no drop) is reported alongside; with
    method="mcnemar" the gate instead fails when d > allowance and p < alpha.
(c) kl: mean per-token KL(baseline || scheme) on the rolling task must be
    <= the scheme's threshold. kl_oracle (same function): KL(float64
    reference of the scheme || scheme), i.e. the distance of the emulation
    layer from what the scheme's numerics spec says it should produce.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from harness.lmeval.gate_plan import LOWER_IS_BETTER, lower_is_better, one_sided_bound  # noqa: F401  (LOWER_IS_BETTER: re-exported)


@dataclass
class GateResult:
    gate: str
    name: str
    passed: bool
    details: dict = field(default_factory=dict)
    skipped: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


_lower_is_better = lower_is_better


def one_sided(task: str, metric: str, measured: float | None, value: float | None, rtol: float) -> GateResult:
    name = f"{task}:{metric}"
    if value is None:
        return GateResult("one_sided", name, True, {"measured": measured, "value": None,
                                                    "note": "no reference value: recorded only"}, skipped=True)
    if measured is None or (isinstance(measured, float) and math.isnan(measured)):
        return GateResult("one_sided", name, False, {"measured": measured, "value": value, "rtol": rtol,
                                                     "note": "metric missing from the results"})
    bound = one_sided_bound(value, rtol, metric)  # the same number the dry-run plan prints
    if _lower_is_better(metric):
        ok = measured <= bound
        rule = "measured <= value*(1+rtol)"
    else:
        ok = measured >= bound
        rule = "measured >= value*(1-rtol)"
    # ratio: the gate passes iff ratio <= 1 (how close the measurement came to failing)
    ratio = (measured / bound if bound else math.inf) if _lower_is_better(metric) else \
        (bound / measured if measured else math.inf)
    return GateResult("one_sided", name, bool(ok), {"measured": measured, "value": value, "rtol": rtol,
                                                    "bound": bound, "rule": rule,
                                                    "margin": (measured - bound) if not _lower_is_better(metric)
                                                    else (bound - measured), "ratio": ratio})


def mcnemar_one_sided_p(b: int, c: int) -> float:
    """Exact McNemar: P(X >= b) for X ~ Binomial(b + c, 1/2) (H1: the scheme is worse)."""
    n = b + c
    if n == 0:
        return 1.0
    total = sum(math.comb(n, k) for k in range(b, n + 1))
    return min(1.0, total / 2.0 ** n)


def bootstrap_drop_bounds(base: np.ndarray, scheme: np.ndarray, confidence: float, resamples: int,
                          seed: int) -> tuple[float, float]:
    """Percentile bounds (alpha, 1 - alpha), alpha = 1 - confidence, of the paired
    accuracy drop: the low end is the one-sided `confidence` lower bound."""
    rng = np.random.default_rng(seed)
    diff = base.astype(np.float64) - scheme.astype(np.float64)
    n = len(diff)
    idx = rng.integers(0, n, size=(resamples, n))
    drops = diff[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(drops, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def paired(task: str, metric: str, base: list, scheme: list, *, allowance: float, confidence: float = 0.95,
           resamples: int = 2000, seed: int = 0, method: str = "bootstrap") -> GateResult:
    """`base`/`scheme`: per-item correctness (0/1), aligned on the same doc ids."""
    name = f"{task}:{metric}"
    b_arr = np.asarray(base, dtype=np.float64)
    s_arr = np.asarray(scheme, dtype=np.float64)
    if b_arr.shape != s_arr.shape or b_arr.size == 0:
        return GateResult("paired", name, False, {"note": f"item vectors differ or are empty: {b_arr.shape} vs {s_arr.shape}"})
    n = int(b_arr.size)
    b = int(((b_arr > 0.5) & (s_arr < 0.5)).sum())
    c = int(((b_arr < 0.5) & (s_arr > 0.5)).sum())
    drop = (b - c) / n
    p = mcnemar_one_sided_p(b, c)
    lo, hi = bootstrap_drop_bounds(b_arr, s_arr, confidence, resamples, seed)
    if method == "bootstrap":
        fail = lo > allowance
        rule = f"fail iff lower {confidence:.0%} bound of the drop > allowance"
    elif method == "mcnemar":
        alpha = 1.0 - confidence
        fail = drop > allowance and p < alpha
        rule = f"fail iff drop > allowance and McNemar one-sided p < {alpha:g}"
    else:
        raise ValueError(f"unknown paired method {method!r}")
    return GateResult("paired", name, not fail, {
        "n": n, "baseline_acc": float(b_arr.mean()), "scheme_acc": float(s_arr.mean()),
        "drop": drop, "discordant_base_only": b, "discordant_scheme_only": c,
        "mcnemar_p_one_sided": p, "drop_ci_low": lo, "drop_ci_high": hi, "confidence": confidence,
        "allowance": allowance, "method": method, "resamples": resamples, "seed": seed, "rule": rule,
        "ratio": _ratio(lo if method == "bootstrap" else drop, allowance),
    })


def _ratio(measured: float, threshold: float) -> float:
    """measured / threshold for a gate that passes iff measured <= threshold."""
    if threshold > 0:
        return measured / threshold
    return 0.0 if measured <= 0 else math.inf


def kl_gate(task: str, mean_kl: float, threshold: float, n_tokens: int, extra: dict | None = None) -> GateResult:
    ok = mean_kl <= threshold
    details = {"mean_kl": mean_kl, "threshold": threshold, "n_tokens": n_tokens,
               "ratio_to_threshold": _ratio(mean_kl, threshold), "ratio": _ratio(mean_kl, threshold),
               "rule": "mean per-token KL(reference || scheme) <= threshold"}
    details.update(extra or {})
    return GateResult("kl", f"{task}:kl", bool(ok), details)
