"""Render suites/lm_eval/configs/tiny-<scheme>.yaml from a measured run.

    python -m harness.lmeval.expected --from reports/<ts>/lm_eval/results.json

Rules (docs/lm_eval.md): every expected value is the value measured on the
full task (600 items) on the reference CPU; rtol 0.05 (one-sided); paired gate
allowance per metric = measured drop vs bf16 + 0.02, rounded up to 0.01
(at least 0.02), at 95% (bootstrap, 2000 resamples, seed 0); KL threshold =
KL_FACTOR x the measured KL, rounded up to three significant digits (bf16 vs
itself: 1e-9).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from .builder import SCHEMES
from .evaluate import CONFIG_DIR

KL_FACTOR = 1.10
RTOL = 0.05
ALLOWANCE = 0.02
KL_DOCS = 100           # the KL gates always read the first 100 rolling documents
ORACLE_FACTOR = 100
ORACLE_FLOOR = 1e-6
METRICS = {"tiny_add_mc": ["acc,none"], "tiny_add_gen": ["exact_match,none"],
           "tiny_add_rolling": ["bits_per_byte,none"]}


def round_up_sig(x: float, digits: int = 3) -> float:
    if x <= 0:
        return 1e-9
    e = math.floor(math.log10(x)) - (digits - 1)
    return float(f"{math.ceil(x / 10 ** e) * 10 ** e:.{digits}g}")


def yaml_float(x: float) -> str:
    """A float PyYAML (YAML 1.1) reads back as a float: 1.000e-09, never 1e-09."""
    return f"{x:.3e}" if abs(x) < 1e-3 else f"{x:.3g}"


def allowance_for(drop: float | None) -> float:
    """Accuracy budget of a scheme: its measured drop + ALLOWANCE, up to 0.01 steps."""
    if drop is None or drop <= 0:
        return ALLOWANCE
    return math.ceil(round((drop + ALLOWANCE) * 100, 6)) / 100


def render(scheme: str, measured: dict, kl: float, source: str, drops: dict | None = None,
           oracle: float | None = None) -> str:
    kl_max = 1e-9 if scheme == "bf16" else (round_up_sig(KL_FACTOR * kl) if kl is not None else None)
    lines = [
        f"# tiny-moe, scheme {scheme}: accuracy gates against the bf16 baseline on the same items.",
        f"# Expected values measured by: {source}",
        "# (rules: harness/lmeval/expected.py; figures: docs/lm_eval.md)",
        "model_name: tiny-moe",
        "tasks:",
    ]
    for task, metrics in METRICS.items():
        lines.append(f"- name: {task}")
        lines.append("  metrics:")
        for m in metrics:
            lines.append(f"  - name: \"{m}\"")
            v = (measured or {}).get(f"{task}:{m}")
            lines.append(f"    value: {v:.4f}" if v is not None else "    value: null")
    lines += [
        f"rtol: {RTOL}",
        "limit: 600",
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
    if drops:
        lines.append("      allowances:    # measured drop vs bf16 + " + f"{ALLOWANCE}")
        for key, drop in sorted(drops.items()):
            lines.append(f"        \"{key}\": {allowance_for(drop):.2f}    # measured drop {drop:+.4f}")
    lines += [
        "      confidence: 0.95",
        "      method: bootstrap",
        "      resamples: 2000",
        "      seed: 0",
        "    kl:",
        "      task: tiny_add_rolling",
        f"      docs: {KL_DOCS}",
        f"      max: {yaml_float(kl_max)}    # measured {kl:.4g} x {KL_FACTOR}" if kl_max is not None and kl
        else f"      max: {'null' if kl_max is None else yaml_float(kl_max)}",
    ]
    if scheme != "bf16":
        if oracle is None:
            lines.append("      oracle_max: null")
        else:
            omax = round_up_sig(max(ORACLE_FLOOR, ORACLE_FACTOR * oracle), 2)
            lines.append(f"      oracle_max: {yaml_float(omax)}    # measured {oracle:.3g}: max({ORACLE_FLOOR:g}, {ORACLE_FACTOR} x)")
    lines.append("")
    return "\n".join(lines)


def from_results(path) -> dict[str, str]:
    data = json.loads(Path(path).read_text())
    out = {}
    for r in data["results"]:
        d = r["details"]
        measured = {k: v["scheme"] for k, v in d["metrics"].items()}
        kl = next((g["details"]["mean_kl"] for g in d["gates"] if g["gate"] == "kl"), 0.0)
        drops = {g["name"]: g["details"]["drop"] for g in d["gates"] if g["gate"] == "paired" and "drop" in g["details"]}
        src = f"python -m harness.lmeval.measure --limit {d['limit']} ({d['model']['device']}, {path})"
        oracle = next((g["details"]["mean_kl"] for g in d["gates"] if g["gate"] == "kl_oracle"), None)
        out[d["scheme"]] = render(d["scheme"], measured, kl, src, drops=drops, oracle=oracle)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.lmeval.expected")
    p.add_argument("--from", dest="src", default=None, help="results.json of a full run")
    p.add_argument("--bootstrap", action="store_true", help="write configs with no expected values yet")
    p.add_argument("--out", default=str(CONFIG_DIR))
    args = p.parse_args(argv)
    if args.bootstrap:
        rendered = {s: render(s, None, None, "not measured yet") for s in SCHEMES}
    elif args.src:
        rendered = from_results(args.src)
    else:
        p.error("--from or --bootstrap is required")
    for scheme, text in rendered.items():
        if scheme in SCHEMES:
            (Path(args.out) / f"tiny-{scheme}.yaml").write_text(text)
            print(f"wrote tiny-{scheme}.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
