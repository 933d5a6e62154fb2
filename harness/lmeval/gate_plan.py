"""The gates of one accuracy run, as objects: what `eval --dry-run` prints and
what the run evaluates are the same list (harness.lmeval.evaluate reads these
objects; suites/lm_eval/test_first_config.py holds plan and run equal for
every shipped config).

Torch- and numpy-free: the dry run builds the list without loading anything.
"""
from __future__ import annotations

from dataclasses import dataclass

# Metrics where lower is better: vLLM's one-sided rule flips to measured <= value*(1+rtol).
LOWER_IS_BETTER = ("perplexity", "bits_per_byte", "word_perplexity", "byte_perplexity")
# lm-eval metrics scored 0/1 per item: the paired gate compares them item by item.
BINARY_METRICS = ("acc", "acc_norm", "exact_match", "em")


def lower_is_better(metric: str) -> bool:
    base = metric.split(",")[0]
    return any(base == m or base.endswith(m) for m in LOWER_IS_BETTER)


def is_binary(metric: str) -> bool:
    return metric.split(",")[0] in BINARY_METRICS


def one_sided_bound(value: float, rtol: float, metric: str) -> float:
    """vLLM's bound: value*(1-rtol), or value*(1+rtol) for a lower-is-better metric."""
    return value * (1 + rtol) if lower_is_better(metric) else value * (1 - rtol)


@dataclass(frozen=True)
class GateSpec:
    """One gate before it is measured. `threshold` is the number the
    measurement is compared with: the one-sided bound, the paired allowance,
    the KL maximum; None when the gate records without gating."""

    gate: str                   # one_sided | paired | kl | kl_oracle
    task: str
    metric: str                 # lm-eval "metric,filter"; "kl" for the KL gates
    threshold: float | None
    record_only: bool = False
    value: float | None = None  # one_sided: the reference value
    rtol: float | None = None   # one_sided
    method: str | None = None   # paired: bootstrap | mcnemar
    confidence: float | None = None
    resamples: int | None = None
    seed: int | None = None
    against: str = ""           # paired / kl: the reference scheme
    docs: int | None = None     # kl: documents read (None: the task's KL documents)

    @property
    def name(self) -> str:
        return f"{self.task}:{self.metric}" if self.gate in ("one_sided", "paired") else f"{self.task}:{self.gate}"

    @property
    def comparison(self) -> str:
        if self.gate == "one_sided":
            return "<=" if lower_is_better(self.metric) else ">="
        return "<="

    def describe(self) -> str:
        """One line, as the dry run prints it and the report repeats it."""
        tail = " (record only)" if self.record_only or self.threshold is None else ""
        if self.gate == "one_sided":
            if self.value is None:
                return f"one_sided {self.name}: recorded, no reference value"
            sign = "+" if lower_is_better(self.metric) else "-"
            return (f"one_sided {self.name} {self.comparison} {self.threshold:.6g} "
                    f"(= {self.value:g}*(1{sign}{self.rtol:g})){tail}")
        if self.gate == "paired":
            return (f"paired {self.name} vs {self.against}: {self.method} lower {self.confidence:.0%} bound of the "
                    f"drop <= allowance {self.threshold:g} (resamples {self.resamples}, seed {self.seed}){tail}")
        what = "KL(float64 reference of the scheme || scheme)" if self.gate == "kl_oracle" else \
            f"KL({self.against} || scheme)"
        docs = f", first {self.docs} documents" if self.docs else ""
        limit = f"<= {self.threshold:g}" if self.threshold is not None else "recorded"
        return f"{self.gate} {self.task}: mean per-token {what} {limit}{docs}{tail}"


def plan_gates(cfg, scheme: str, *, baseline: bool = True, record_only: bool = False) -> list[GateSpec]:
    """Every gate the run of `cfg` under `scheme` evaluates, in order.
    `baseline` False: the model folder holds only a quantized checkpoint, so
    no bf16 baseline runs and only the gates that need none are planned."""
    out: list[GateSpec] = []
    if cfg.one_sided:
        for t in cfg.tasks:
            for m in t.metrics:
                bound = None if m.value is None else one_sided_bound(m.value, cfg.rtol, m.name)
                out.append(GateSpec("one_sided", t.name, m.name, bound, record_only, value=m.value, rtol=cfg.rtol))
    if baseline and cfg.paired is not None:
        p = cfg.paired
        for task, metric in paired_metrics(cfg):
            out.append(GateSpec("paired", task, metric, p.allowance_for(task, metric), record_only, method=p.method,
                                confidence=p.confidence, resamples=p.resamples, seed=p.seed,
                                against=cfg.baseline_scheme))
    if cfg.kl is not None:
        if baseline:
            out.append(GateSpec("kl", cfg.kl.task, "kl", cfg.kl.max, record_only, against=cfg.baseline_scheme,
                                docs=cfg.kl.docs))
        if cfg.kl.oracle and scheme != cfg.baseline_scheme and scheme != "bf16":
            out.append(GateSpec("kl_oracle", cfg.kl.task, "kl", cfg.kl.oracle_max, record_only, docs=cfg.kl.docs))
    return out


def paired_metrics(cfg) -> list[tuple[str, str]]:
    """(task, metric) pairs the paired gate compares: harness.gates.paired.metrics
    when given, else every 0/1 metric of the config (BINARY_METRICS)."""
    if cfg.paired is None:
        return []
    if cfg.paired.metrics:
        return [tuple(m.split(":", 1)) for m in cfg.paired.metrics]
    return [(t.name, m.name) for t in cfg.tasks for m in t.metrics if is_binary(m.name)]
