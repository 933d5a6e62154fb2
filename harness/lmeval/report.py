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


def summary_markdown(title: str, results: list[dict], meta: dict | None = None, plan: list | None = None) -> str:
    lines = [f"## {title}", ""]
    if (meta or {}).get("interrupted"):
        lines += [f"**Interrupted** ({meta.get('signal')}): only what finished is listed.", ""]
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
        lines.append(f"| {_c(r['name'])} | {d.get('scheme', '')} | {status} | {_c(mets or r.get('message', ''))} "
                     f"| {paired} | {kls[0]} | {kls[1]} | {_c(close)} |")
    lines.append("")
    for r in results:
        if not r.get("passed") or r.get("skipped"):
            lines += [f"- `{r['name']}`: {r.get('message', '')}"]
    for r in results:
        if r.get("skipped") or not r.get("details", {}).get("gates"):
            continue
        if len(results) == 1 or not r.get("passed"):
            lines += ["", f"### Gates of `{r['name']}` (the plan `eval --dry-run` prints, and each verdict)", "",
                      "| verdict | gate (planned) | measured |", "|---|---|---|"]
            for g in r["details"]["gates"]:
                verdict = "recorded" if g.get("skipped") else ("pass" if g["passed"] else "**FAIL**")
                lines.append(f"| {verdict} | {_c(g['details'].get('plan', g['name']))} | {_c(measured(g))} |")
    if plan and not any(r.get("details", {}).get("gates") for r in results):
        lines += ["", "Gates (as `eval --dry-run` plans them):", ""] + [f"- {p}" for p in plan]
    seeds = sorted({(r.get('details', {}).get('seed')) for r in results if r.get('details', {}).get('seed') is not None})
    lines += ["", f"lm-eval seeds: {seeds}; paired bootstrap seeds in each gate's details; "
              "KL = mean over predicted tokens of KL(reference || scheme) on the rolling task's KL documents; "
              "the reference is the baseline scheme, or harness.moe's float64 reference of the scheme.", ""]
    return "\n".join(lines)


def _c(text) -> str:
    """A markdown table cell: a `|` (KL(a || b)) would end the cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def measured(g: dict) -> str:
    """A gate's measurement in a few words (the summary's and the terminal's)."""
    d = g["details"]
    if g["gate"] == "one_sided":
        return _f(d.get("measured"))
    if g["gate"] == "paired":
        if "drop" not in d:
            return d.get("note", "")
        return f"drop {d['drop']:+.4f}, lower bound {d['drop_ci_low']:+.4f} (n {d['n']})"
    return f"{_f(d.get('mean_kl'))} over {d.get('n_tokens', '?')} tokens"


def _f(v) -> str:
    if v is None:
        return "-"
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v)


ACC_METRICS = ("acc", "exact_match", "acc_norm")
PASS_COLOR, FAIL_COLOR = "#4878a8", "#c44e52"


def error_bars(p: float, n: int) -> tuple[float, float]:
    """(below, above) of the 95% Wilson interval around p, never negative: at
    p = 1 the upper bound computes to 1 - 1e-16, which matplotlib refuses."""
    lo, hi = wilson(p, n)
    return max(0.0, p - lo), max(0.0, hi - p)


def _bound(r: dict, key: str):
    for g in r["details"].get("gates", []):
        if g["gate"] == "one_sided" and g["name"] == key:
            return g["details"].get("bound")
    return None


def plot(path: Path, results: list[dict]) -> Path | None:
    """accuracy_kl.png of `figure(results)` (None: nothing to plot, or no matplotlib)."""
    fig = figure(results)
    if fig is None:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return atomic_write_bytes(path, buf.getvalue())


def figure(results: list[dict]):
    """Accuracy (95% Wilson intervals, the one-sided bound of each metric as
    a black tick) and KL per scheme (its threshold as a black tick); a bar
    is red when its gate failed. Every threshold lies inside the axes."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        return None
    rows = [r for r in results if not r.get("skipped") and r.get("details", {}).get("metrics")]
    if not rows:
        return None
    labels = [r["details"]["scheme"] for r in rows]
    acc_keys = []
    for r in rows:
        for k in r["details"]["metrics"]:
            if k.split(":")[1].split(",")[0] in ACC_METRICS and k not in acc_keys:
                acc_keys.append(k)
    fig = Figure(figsize=(11, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2, 1)
    width = 0.8 / max(1, len(acc_keys))
    lowest = 1.0
    for j, k in enumerate(acc_keys):
        for i, r in enumerate(rows):
            m = r["details"]["metrics"].get(k, {})
            v = m.get("scheme")
            if v is None:
                continue
            n = m.get("n") or items_for(r["details"].get("limit"), 0) or None
            below, above = error_bars(v, n) if n else (0.0, 0.0)
            x = i + (j - (len(acc_keys) - 1) / 2) * width
            gate = next((g for g in r["details"].get("gates", []) if g["gate"] == "one_sided" and g["name"] == k), None)
            failed = gate is not None and not gate["passed"] and not gate.get("skipped")
            ax.bar([x], [v], width=width, yerr=[[below], [above]], capsize=2,
                   color=FAIL_COLOR if failed else f"C{j}", edgecolor="black" if failed else "none",
                   label=k.split(":")[0] if i == 0 else None)
            lowest = min(lowest, v - below)
            b = _bound(r, k)
            if b is not None:
                ax.plot([x - width / 2, x + width / 2], [b, b], color="black", linewidth=1.5)
                lowest = min(lowest, b)
    pad = 0.6 + max(0, 3 - len(rows)) * 0.5   # a lone scheme is a bar, not a wall
    ax.set_xlim(-pad, len(rows) - 1 + pad)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    ax.set_ylim(max(0.0, lowest - 0.08), 1.02)
    ax.set_ylabel("accuracy (bars: 95% Wilson interval)")
    ax.set_title("accuracy per scheme (black tick: one-sided bound)", fontsize=10, pad=22)
    handles, names = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="black", linewidth=1.5))
    names.append("bound (value x (1 - rtol))")
    # above the axes: below them the rotated scheme names need the room
    ax.legend(handles, names, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    ax.grid(axis="y", alpha=0.3)

    ax2 = fig.add_subplot(1, 2, 2)
    kls, thr, ok = [], [], []
    for r in rows:
        g = next((g for g in r["details"].get("gates", []) if g["gate"] == "kl"), None)
        kls.append(g["details"].get("mean_kl", math.nan) if g else math.nan)
        thr.append(g["details"].get("threshold") if g else None)
        ok.append(g is None or g["passed"] or g.get("skipped"))
    positive = [v for v in kls + thr if isinstance(v, (int, float)) and v and v > 0 and math.isfinite(v)]
    floor = min(positive) / 4 if positive else 1e-5
    top = max(positive) * 3 if positive else 1.0
    ax2.bar(range(len(rows)), [k if k and k > 0 else math.nan for k in kls],
            color=[PASS_COLOR if o else FAIL_COLOR for o in ok])
    for i, (k, t) in enumerate(zip(kls, thr)):
        if k == 0:
            ax2.annotate("0", (i, floor * 1.3), ha="center", fontsize=8)
        if t and t > 0:
            ax2.plot([i - 0.4, i + 0.4], [t, t], color="black", linewidth=1.5)
    ax2.set_yscale("log")
    ax2.set_ylim(floor, top)
    ax2.set_xlim(-pad, len(rows) - 1 + pad)
    ax2.set_xticks(range(len(labels)))
    ax2.set_xticklabels(labels, rotation=35, ha="right", fontsize=7)
    ax2.set_ylabel("mean per-token KL vs baseline (nats)")
    ax2.set_title("KL per scheme (black tick: threshold; red: gate failed)", fontsize=10, pad=22)
    ax2.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


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
