"""Writes <report_dir>/lm_eval/: raw lm-eval results per run, results.json,
summary.md and accuracy_kl.png (accuracy per scheme with 95% Wilson intervals,
KL per scheme against its threshold). Every file is written atomically
(harness.util.report)."""

from __future__ import annotations

import io
import math
from pathlib import Path

from harness.util.report import atomic_write_bytes, atomic_write_json, atomic_write_text, to_jsonable


def items_for(limit, available: int) -> int:
    """How many items lm-eval takes for `limit` (a count, or a fraction 0 < limit < 1, rounded up as lm-eval does)."""
    if not limit:
        return available
    if isinstance(limit, float) and limit < 1:
        return math.ceil(available * limit)
    return min(int(limit), available)


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n <= 0 or p is None:
        return (math.nan, math.nan)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (centre - half, centre + half)


def _folder(report_dir) -> Path:
    path = Path(getattr(report_dir, "path", report_dir)) / "lm_eval"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name.replace("lm_eval/", ""))


def summary_markdown(title: str, results: list[dict]) -> str:
    lines = [f"## {title}", ""]
    n_fail = sum(1 for r in results if not r.get("passed") and not r.get("skipped"))
    n_skip = sum(1 for r in results if r.get("skipped"))
    lines += [f"**{n_fail} failed**, {len(results) - n_fail - n_skip} passed, {n_skip} skipped", ""]
    lines += ["| run | scheme | status | metrics (scheme / baseline / expected) | paired drop [CI] | KL vs baseline (max) "
              "| KL vs float64 reference (max) | closest gate (measured / threshold, passes <= 1) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        d = r.get("details", {})
        status = "skipped" if r.get("skipped") else ("passed" if r.get("passed") else "**FAILED**")
        mets = "; ".join(f"{k.split(':')[0]} {k.split(':')[1].split(',')[0]} {_f(v['scheme'])} / "
                         f"{_f(v['baseline'])} / {_f(v['expected'])}" for k, v in d.get("metrics", {}).items())
        paired = "; ".join(f"{g['details'].get('drop', math.nan):+.3f} [{g['details'].get('drop_ci_low', math.nan):+.3f}, "
                           f"{g['details'].get('drop_ci_high', math.nan):+.3f}] p={g['details'].get('mcnemar_p_one_sided', math.nan):.3g}"
                           for g in d.get("gates", []) if g["gate"] == "paired" and "drop" in g["details"])
        kls = []
        for gate in ("kl", "kl_oracle"):
            kl = [g for g in d.get("gates", []) if g["gate"] == gate]
            kls.append(f"{kl[0]['details'].get('mean_kl', math.nan):.4g} ({_f(kl[0]['details'].get('threshold'))})"
                       if kl else "")
        ratios = {k: v for k, v in (d.get("gate_ratios") or {}).items() if v is not None}
        closest = max(ratios.items(), key=lambda kv: kv[1]) if ratios else None
        close = f"{closest[1]:.3g} ({closest[0]})" if closest else ""
        lines.append(f"| {r['name']} | {d.get('scheme', '')} | {status} | {mets or r.get('message', '')} | {paired} "
                     f"| {kls[0]} | {kls[1]} | {close} |")
    lines.append("")
    for r in results:
        if not r.get("passed") or r.get("skipped"):
            lines += [f"- `{r['name']}`: {r.get('message', '')}"]
    seeds = sorted({(r.get('details', {}).get('seed')) for r in results if r.get('details', {}).get('seed') is not None})
    lines += ["", f"lm-eval seeds: {seeds}; paired bootstrap seeds in each gate's details; "
              "KL = mean over predicted tokens of KL(reference || scheme) on the rolling task's KL documents; "
              "the reference is the baseline scheme, or harness.moe's float64 reference of the scheme.", ""]
    return "\n".join(lines)


def _f(v) -> str:
    if v is None:
        return "-"
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v)


def plot(path: Path, results: list[dict]) -> Path | None:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    rows = [r for r in results if not r.get("skipped")]
    if not rows:
        return None
    labels = [r["details"]["scheme"] for r in rows]
    acc_keys = []
    for r in rows:
        for k, v in r["details"]["metrics"].items():
            base = k.split(":")[1].split(",")[0]
            if base in ("acc", "exact_match", "acc_norm") and k not in acc_keys:
                acc_keys.append(k)
    fig = Figure(figsize=(11, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2, 1)
    width = 0.8 / max(1, len(acc_keys))
    for j, k in enumerate(acc_keys):
        xs, ys, lo, hi = [], [], [], []
        for i, r in enumerate(rows):
            v = r["details"]["metrics"].get(k, {}).get("scheme")
            if v is None:
                continue
            n = items_for(r["details"].get("limit"), 600)  # the tiny tasks hold 600 items
            a, b = wilson(v, n)
            xs.append(i + (j - (len(acc_keys) - 1) / 2) * width)
            ys.append(v)
            lo.append(v - a)
            hi.append(b - v)
        ax.bar(xs, ys, width=width, yerr=[lo, hi], capsize=2, label=k.split(":")[0])
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (95% Wilson interval)")
    ax.set_title("accuracy per scheme")
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(axis="y", alpha=0.3)
    ax2 = fig.add_subplot(1, 2, 2)
    kls, thr = [], []
    for r in rows:
        g = [g for g in r["details"]["gates"] if g["gate"] == "kl"]
        kls.append(g[0]["details"].get("mean_kl", math.nan) if g else math.nan)
        thr.append(g[0]["details"].get("threshold") if g else None)
    colors = ["#4878a8" if r.get("passed") else "#c44e52" for r in rows]
    ax2.bar(range(len(rows)), [k if k > 0 else math.nan for k in kls], color=colors)
    for i, k in enumerate(kls):
        if k == 0:
            ax2.annotate("0", (i, 1e-5), ha="center", fontsize=8)
    ax2.set_ylim(bottom=1e-5)
    for i, t in enumerate(thr):
        if t and t >= 1e-5:
            ax2.plot([i - 0.4, i + 0.4], [t, t], color="black", linewidth=1)
    ax2.set_yscale("log")
    ax2.set_xticks(range(len(labels)))
    ax2.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    ax2.set_ylabel("mean per-token KL vs baseline (nats)")
    ax2.set_title("KL per scheme (line: threshold)")
    ax2.grid(axis="y", alpha=0.3)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return atomic_write_bytes(path, buf.getvalue())


def write_lm_eval_report(report_dir, results: list[dict], title: str = "lm-eval") -> Path:
    folder = _folder(report_dir)
    for r in results:
        if r.get("raw"):
            atomic_write_json(folder / "raw" / f"{_slug(r['name'])}.json", to_jsonable(r["raw"]))
    slim = [{k: v for k, v in r.items() if k != "raw"} for r in results]
    atomic_write_json(folder / "results.json", to_jsonable({"title": title, "results": slim}))
    atomic_write_text(folder / "summary.md", summary_markdown(title, slim))
    plot(folder / "accuracy_kl.png", slim)
    return folder
