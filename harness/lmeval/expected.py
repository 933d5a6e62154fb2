"""Render suites/lm_eval/configs/tiny-<scheme>.yaml from the SPREAD of several
measured runs, never from one.

    python -m harness.lmeval.expected --from LABEL=REPORT/lm_eval [--from ...]

Each --from is one `python -m harness.lmeval.measure --limit 600` report
(results.json + raw/), made under one CPU kernel set (ATEN_CPU_CAPABILITY,
MKL_ENABLE_INSTRUCTIONS) or device. Every gate is evaluated on two item sets:
the 600 items of `moe-harness eval` and the first 200 that `moe-harness run`
uses (computed exactly from the per-item results of the 600-item run). Rules:

  one_sided value   the worst value over runs x item sets, rounded outward to
                    4 decimals (as floats: never above the worst value for a
                    higher-is-better metric, never below it otherwise); vLLM's rule (measured >= value * (1 - rtol),
                    rtol 0.05) then leaves a 5% relative margin below the
                    worst value ever measured, stated per metric in items.
  paired allowance  the largest drop vs bf16 over runs x item sets + 0.02
                    (12 of 600 items), up to 0.01 steps; the gate fails only
                    when the one-sided 95% bootstrap lower bound of the drop
                    exceeds it.
  kl.max            the largest KL vs bf16 over runs x 1.1, up to three
                    significant digits (never below it) (the KL task's 100 documents are the
                    same for both item sets).
  kl.oracle_max     0 by construction: the certified oracle (moe_swap.OracleMoE)
                    equals the layer wherever the layer lies within its
                    derived float32 tolerance (harness/moe/tolerance.py), so a
                    correct layer gives KL exactly 0 on every machine and any
                    element outside its bound gives KL > 0.
  bf16 kl.max       0 by construction (the baseline against itself).

Rendering refuses (exit 1, naming the run, scheme and gate) when any measured
run x item set would fail a rendered gate.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path

from harness.lmeval.schemes import SCHEMES
from harness.lmeval.configs import CONFIG_DIR
from harness.lmeval.gates import one_sided as one_sided_gate
from harness.lmeval.gates import paired as paired_gate

KL_FACTOR = 1.10
RTOL = 0.05
ALLOWANCE = 0.02
KL_DOCS = 100           # the KL gates always read the first 100 rolling documents
LIMIT = 600             # items per task of `moe-harness eval` (the configs' limit)
RUN_LIMIT = 200         # items per task of `moe-harness run`'s lm-eval section
PAIRED = {"confidence": 0.95, "resamples": 2000, "seed": 0}
METRICS = {"tiny_add_mc": ["acc,none"], "tiny_add_gen": ["exact_match,none"],
           "tiny_add_rolling": ["bits_per_byte,none"]}
BINARY = {"tiny_add_mc:acc,none", "tiny_add_gen:exact_match,none"}


def _dec(x) -> Decimal:
    """A measured float as the decimal it prints as (repr: the shortest decimal
    that reads back as the same float), so 1.1 x 0.05 is 0.055, not 0.05500000000000001."""
    return x if isinstance(x, Decimal) else Decimal(repr(float(x)))


def round_outward(x, decimals: int, up: bool) -> float:
    """x on the grid of `decimals` decimals, on the side that never makes a
    gate tighter than the measurement: up (>= x) for a maximum, down (<= x)
    for a minimum. Rounding is monotone, so the float read back is on the
    same side of the measured float (suites/lm_eval/test_first_config.py
    puts a value one ulp off a grid point)."""
    q = _dec(x).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_CEILING if up else ROUND_FLOOR)
    return float(q)


def round_up_sig(x, digits: int = 3) -> float:
    """The smallest decimal of `digits` significant digits that is >= x."""
    d = _dec(x)
    if d <= 0:
        return 0.0
    exp = d.adjusted() - (digits - 1)
    return float(d.quantize(Decimal(1).scaleb(exp), rounding=ROUND_CEILING))


def yaml_float(x: float) -> str:
    """A float PyYAML (YAML 1.1) reads back as a float: 1.000e-09, never 1e-09."""
    if x == 0:
        return "0.0"
    return f"{x:.3e}" if abs(x) < 1e-3 else f"{x:.3g}"


def allowance_for(drop: float | None) -> float:
    """Accuracy budget of a scheme: its largest measured drop + ALLOWANCE, up to 0.01 steps."""
    if drop is None or drop <= 0:
        return ALLOWANCE
    return math.ceil(round((drop + ALLOWANCE) * 100, 6)) / 100


def _lower_is_better(key: str) -> bool:
    return "perplexity" in key or "bits_per_byte" in key


def _outward(v: float, key: str) -> float:
    """Round a worst value to 4 decimals away from the passing side (never tighter than v)."""
    return round_outward(v, 4, up=_lower_is_better(key))


# --------------------------------------------------------------------------- one run's figures
@dataclass
class Measured:
    """One run x one scheme: metric values and paired vectors per item set."""

    label: str
    scheme: str
    values: dict = field(default_factory=dict)     # (key, n_items) -> value
    items: dict = field(default_factory=dict)      # (key, n_items) -> (base list, scheme list)
    kl: float | None = None
    oracle_kl: float | None = None
    oracle_max_ratio: float | None = None


def _prefix_value(rows: list[dict], metric: str, n: int) -> float:
    base = metric.split(",")[0]
    sel = [r for r in rows if int(r["doc_id"]) < n and r.get("filter", "none") == metric.partition(",")[2]]
    if base == "bits_per_byte":
        ll = sum(r[base][0] for r in sel)
        nbytes = sum(r[base][1] for r in sel)
        return -(ll / nbytes) / math.log(2)
    return sum(float(r[base]) for r in sel) / len(sel)


def _binary_vector(rows: list[dict], metric: str, n: int) -> list[float]:
    base = metric.split(",")[0]
    sel = sorted((r for r in rows if int(r["doc_id"]) < n), key=lambda r: int(r["doc_id"]))
    return [float(r[base]) for r in sel]


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name.replace("lm_eval/", ""))


def read_run(label: str, folder) -> dict[str, Measured]:
    """A measure report's lm_eval folder -> {scheme: Measured}."""
    folder = Path(folder)
    data = json.loads((folder / "results.json").read_text())
    out = {}
    for r in data["results"]:
        d = r["details"]
        if d.get("limit") != LIMIT:
            raise ValueError(f"{folder}: {r['name']} was measured on {d.get('limit')} items, expected {LIMIT}")
        raw = json.loads((folder / "raw" / f"{_slug(r['name'])}.json").read_text())
        m = Measured(label, d["scheme"])
        for task, metrics in METRICS.items():
            for metric in metrics:
                key = f"{task}:{metric}"
                rows_s = raw["scheme"]["per_item"][task]
                rows_b = raw["baseline"]["per_item"][task]
                for n in (LIMIT, RUN_LIMIT):
                    m.values[(key, n)] = _prefix_value(rows_s, metric, n)
                    if key in BINARY:
                        m.items[(key, n)] = (_binary_vector(rows_b, metric, n), _binary_vector(rows_s, metric, n))
                reported = d["metrics"][key]["scheme"]
                if not math.isclose(m.values[(key, LIMIT)], reported, rel_tol=1e-9, abs_tol=1e-12):
                    raise ValueError(f"{folder}: {key} recomputed from items {m.values[(key, LIMIT)]} "
                                     f"!= reported {reported}")
        for g in d["gates"]:
            if g["gate"] == "kl":
                m.kl = g["details"]["mean_kl"]
            elif g["gate"] == "kl_oracle":
                m.oracle_kl = g["details"]["mean_kl"]
                m.oracle_max_ratio = g["details"].get("certification", {}).get("max_err_over_tol")
        out[m.scheme] = m
    return out


# --------------------------------------------------------------------------- thresholds
def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.4f}" if lo == hi else f"{lo:.4f}..{hi:.4f}"


def derive(scheme: str, runs: list[Measured]) -> dict:
    """Thresholds of one scheme from its measured runs, with the figures behind each."""
    out = {"values": {}, "allowances": {}, "notes": {}}
    for task, metrics in METRICS.items():
        for metric in metrics:
            key = f"{task}:{metric}"
            vals = {n: [r.values[(key, n)] for r in runs] for n in (LIMIT, RUN_LIMIT)}
            every = vals[LIMIT] + vals[RUN_LIMIT]
            worst = max(every) if _lower_is_better(key) else min(every)
            value = _outward(worst, key)
            bound = value * (1 + RTOL) if _lower_is_better(key) else value * (1 - RTOL)
            margin = (bound - worst) if _lower_is_better(key) else (worst - bound)
            items = f" = {math.floor(margin * LIMIT + 1e-9)} of {LIMIT} items" if key in BINARY else ""
            out["values"][key] = value
            out["notes"][key] = (f"{LIMIT} items {_span(vals[LIMIT])}, first {RUN_LIMIT} {_span(vals[RUN_LIMIT])}; "
                                 f"bound {bound:.4f}, margin {margin:.4f}{items}")
    if scheme != "bf16":
        for key in BINARY:
            drops = [sum(b) / len(b) - sum(s) / len(s) for r in runs for (b, s) in
                     (r.items[(key, LIMIT)], r.items[(key, RUN_LIMIT)])]
            out["allowances"][key] = (allowance_for(max(drops)), f"drops {min(drops):+.4f}..{max(drops):+.4f}")
        kls = [r.kl for r in runs]
        out["kl_max"] = round_up_sig(_dec(max(kls)) * _dec(KL_FACTOR))
        out["kl_note"] = f"KL {min(kls):.5g}..{max(kls):.5g} x {KL_FACTOR}"
        okl = [r.oracle_kl for r in runs if r.oracle_kl is not None]
        ratios = [r.oracle_max_ratio for r in runs if r.oracle_max_ratio is not None]
        out["oracle_note"] = ("0 by construction (certified oracle); measured "
                              + (f"{max(okl):.3g}" if okl else "n/a")
                              + (f", largest err/tol {min(ratios):.3g}..{max(ratios):.3g}" if ratios else ""))
    else:
        out["kl_max"] = 0.0
        out["kl_note"] = "0 by construction: bf16 against itself"
    return out


def check(scheme: str, runs: list[Measured], th: dict) -> list[str]:
    """Every measured run x item set passes the rendered gates, or the reasons it would not."""
    problems = []
    for r in runs:
        for (key, n), v in r.values.items():
            task, metric = key.split(":", 1)
            g = one_sided_gate(task, metric, v, th["values"][key], RTOL)
            if not g.passed:
                problems.append(f"{r.label} {scheme} {key} on {n} items: {v} fails bound {g.details['bound']}")
        for (key, n), (b, s) in r.items.items():
            if scheme == "bf16":
                continue
            task, metric = key.split(":", 1)
            g = paired_gate(task, metric, b, s, allowance=th["allowances"][key][0], **PAIRED)
            if not g.passed:
                problems.append(f"{r.label} {scheme} {key} on {n} items: paired lower bound "
                                f"{g.details['drop_ci_low']} > allowance {th['allowances'][key][0]}")
        if r.kl is not None and r.kl > th["kl_max"]:
            problems.append(f"{r.label} {scheme} KL {r.kl} > {th['kl_max']}")
        if r.oracle_kl is not None and r.oracle_kl > 0:
            problems.append(f"{r.label} {scheme} kl_oracle {r.oracle_kl} > 0: a block left its derived tolerance")
    return problems


# --------------------------------------------------------------------------- YAML
def render(scheme: str, th: dict | None, runs_desc: str) -> str:
    lines = [
        f"# tiny-moe, scheme {scheme}: accuracy gates against the bf16 baseline on the same items.",
        f"# Thresholds from the spread of {runs_desc}",
        "# (rules and margins: harness/lmeval/expected.py; figures: docs/lm_eval.md)",
        "model_name: tiny-moe",
        "tasks:",
    ]
    for task, metrics in METRICS.items():
        lines.append(f"- name: {task}")
        lines.append("  metrics:")
        for m in metrics:
            key = f"{task}:{m}"
            lines.append(f"  - name: \"{m}\"")
            if th is None:
                lines.append("    value: null")
            else:
                lines.append(f"    value: {th['values'][key]:.4f}    # worst of {th['notes'][key]}")
    lines += [
        f"rtol: {RTOL}",
        f"limit: {LIMIT}",
        "num_fewshot: 0",
        "harness:",
        f"  scheme: {scheme}",
        "  baseline_scheme: bf16",
        "  backend: unfused",
        "  dtype: float32",
        "  batch_size: 64",
        "  seed: 0",
        "  gates:",
        "    paired:",
        f"      allowance: {ALLOWANCE}",
    ]
    if th is not None and th["allowances"]:
        lines.append(f"      allowances:    # largest measured drop vs bf16 + {ALLOWANCE}")
        for key, (allowance, note) in sorted(th["allowances"].items()):
            lines.append(f"        \"{key}\": {allowance:.2f}    # {note}")
    lines += [
        f"      confidence: {PAIRED['confidence']}",
        "      method: bootstrap",
        f"      resamples: {PAIRED['resamples']}",
        f"      seed: {PAIRED['seed']}",
        "    kl:",
        "      task: tiny_add_rolling",
        f"      docs: {KL_DOCS}",
    ]
    if th is None:
        lines.append("      max: null")
    else:
        lines.append(f"      max: {yaml_float(th['kl_max'])}    # {th['kl_note']}")
    if scheme != "bf16":
        note = th["oracle_note"] if th is not None else "0 by construction (certified oracle)"
        lines.append(f"      oracle_max: 0.0    # {note}")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.lmeval.expected", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="src", action="append", default=[], metavar="LABEL=FOLDER",
                   help="a measure report's lm_eval folder, labelled by its kernel set / device (repeat)")
    p.add_argument("--bootstrap", action="store_true", help="write configs with no expected values yet")
    p.add_argument("--out", default=str(CONFIG_DIR))
    args = p.parse_args(argv)
    if args.bootstrap:
        rendered = {s: render(s, None, "no measured runs yet") for s in SCHEMES}
    elif args.src:
        runs: dict[str, list[Measured]] = {}
        labels = []
        for item in args.src:
            label, sep, folder = item.partition("=")
            if not sep:
                p.error(f"--from {item!r}: expected LABEL=FOLDER")
            labels.append(label)
            try:
                measured = read_run(label, folder)
            except (OSError, ValueError, KeyError) as e:  # a folder that is not a measure report
                p.error(f"--from {item}: not a `harness.lmeval.measure` report folder: {type(e).__name__}: {e}")
            for scheme, m in measured.items():
                runs.setdefault(scheme, []).append(m)
        desc = (f"`python -m harness.lmeval.measure --limit {LIMIT}` under {len(labels)} kernel sets / devices: "
                + ", ".join(labels))
        rendered, problems = {}, []
        for scheme, ms in runs.items():
            if len(ms) != len(labels):
                p.error(f"scheme {scheme} is missing from some runs")
            th = derive(scheme, ms)
            problems += check(scheme, ms, th)
            rendered[scheme] = render(scheme, th, desc)
        if problems:
            for line in problems:
                print(f"refused: {line}")
            return 1
    else:
        p.error("--from or --bootstrap is required")
    for scheme, text in rendered.items():
        if scheme in SCHEMES:
            (Path(args.out) / f"tiny-{scheme}.yaml").write_text(text)
            print(f"wrote tiny-{scheme}.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
