"""Conformance reports: results.json, summary.md and heatmap.png (implementation
x format x stage; colour = verdict: green every value matched, amber every
divergence explained by the registry, red an unexplained divergence or an
error; the text is the match rate), written atomically with harness.util.report.
`finding_line` is the one rendering of a finding: summary.md, the terminal
(`moe-harness conform`) and the pytest plugin's message all use it."""
from __future__ import annotations

import math

from harness.util import report as hr

from harness.conformance.protocol import STAGES


def aggregate(data: dict) -> dict:
    """{(impl, fmt, stage): (matched, compared, unexplained blocks, error?)}"""
    agg = {}
    for c in data["cells"]:
        for stage, s in c["stages"].items():
            key = (c["implementation"], c["format"], stage)
            m, n, u, err = agg.get(key, (0, 0, 0, False))
            if s.get("status") == "ok":
                m, n, u = m + s["matched"], n + s["compared"], u + s["unexplained_blocks"]
            elif s.get("status") == "error":
                err = True
            agg[key] = (m, n, u, err)
    return agg


def _fmt_block(xs) -> str:
    nz = [(i, v) for i, v in enumerate(xs) if not (isinstance(v, (int, float)) and v == 0 and math.copysign(1, v) > 0)]
    return ", ".join(f"[{i}]={float(v)!r}" for i, v in nz) or "all +0.0"


def _diff_positions(f) -> list:
    return [i for i, (a, b) in enumerate(zip(f.get("impl", []), f.get("reference", []))) if repr(a) != repr(b)][:4]


def finding_line(c: dict, stage: str, f: dict) -> str:
    """One finding: where, who is right (the verdict), the minimal block and the differing values."""
    why = f"convention difference `{f['explained_by']}`" if f.get("explained_by") else "**UNEXPLAINED**"
    where = f"{c['implementation']} {_cell(c)} `{stage}`"
    if "error" in f:
        return f"{where}: {why}; shrinking failed: {f['error']}"
    pos = _diff_positions(f)
    diffs = "; ".join(f"[{i}] impl {f['impl'][i]!r} ref {f['reference'][i]!r} spec {f['spec'][i]!r}" for i in pos)
    real = f.get("real_arithmetic_verdict")
    verdict = f["verdict"] + (f" (NVFP4 convention; in real arithmetic: {real})" if real and real != f["verdict"] else "")
    return (f"{where} ({f['family']}): {why}; verdict: **{verdict}**; minimal block ({f['nonzero']} nonzero of "
            f"{f['block_size']}): {_fmt_block(f['minimal'])}; {diffs}")


def unexplained(data: dict):
    """(cell, stage, finding or None for a stage error) of every unexplained divergence, in run order."""
    for c in data["cells"]:
        for stage, s in c["stages"].items():
            if s.get("status") == "error":
                yield c, stage, {"error_stage": s["error"]}
            for f in s.get("findings", []):
                if not f.get("explained_by"):
                    yield c, stage, f


def plain(line: str) -> str:
    """A markdown line for a terminal: no bold, no code quotes."""
    return line.replace("**", "").replace("`", "")


def matched_registry(data: dict) -> list[dict]:
    """The registry entries some finding of this run was explained by."""
    used = {f.get("explained_by") for c in data["cells"] for s in c["stages"].values()
            for f in s.get("findings", []) if f.get("explained_by")}
    return [e for e in data["registry"] if e["id"] in used]


def markdown(data: dict, meta: dict) -> str:
    """The unexplained divergences first (verdict and minimal block), then
    match rates, explained findings (folded) and the registry entries that
    explained something in this run."""
    lines = ["# moe-harness conform", ""]
    status = "FAILED: unexplained divergences" if data["failed"] else "passed (every divergence explained)"
    lines += [f"**{status}** -- seed {data['seed']}, device {data['device']}, command `{meta.get('command', '')}`", ""]
    if data.get("interrupted"):
        lines += [f"**INTERRUPTED ({data['interrupted']})**: the implementations and cells below are those that "
                  "finished before the signal.", ""]
    failed_impls = [i for i in data["implementations"] if i.get("error")]
    if failed_impls:
        lines += ["## Failed implementations", ""]
        for i in failed_impls:
            tail = " ".join((i.get("output_tail") or "").split())[-300:]
            lines.append(f"- `{i['name']}`: **FAIL**: {i['error']}" + (f"; last output: `{tail}`" if tail else ""))
        lines.append("")
    for i in data["implementations"]:
        if i.get("isolation"):
            lines += [f"- `{i['name']}` ran {i['isolation']}", ""]
    bad = list(unexplained(data))
    lines += ["## Unexplained divergences (who is right, and the smallest block that shows it)", ""]
    for c, stage, f in bad:
        lines.append(f"- **{c['implementation']}** {_cell(c)} `{stage}`: ERROR {f['error_stage']}" if "error_stage" in f
                     else "- " + finding_line(c, stage, f))
    if not bad:
        lines.append("none")
    lines.append("")
    if data["skipped"]:
        lines += ["## Skipped implementations", ""]
        lines += [f"- `{s['name']}`: {s['reason']}" for s in data["skipped"]]
        lines.append("")
    lines += ["## Match rates", "", "| implementation | version | format | " + " | ".join(STAGES) + " |",
              "|---|---|---|" + "---|" * len(STAGES)]
    agg = aggregate(data)
    versions = {i["name"]: i["version"] for i in data["implementations"]}
    seen = []
    for (impl, fmt, _stage) in agg:
        if (impl, fmt) not in seen:
            seen.append((impl, fmt))
    for impl, fmt in seen:
        cells = []
        for stage in STAGES:
            m, n, u, err = agg.get((impl, fmt, stage), (0, 0, 0, False))
            if err:
                cells.append("**ERROR**")
            elif n == 0:
                cells.append("n/a")
            else:
                cells.append(f"{100 * m / n:.2f}%" + (f" (**{u} unexplained**)" if u else ""))
        lines.append(f"| {impl} | {versions.get(impl, '')} | {fmt} | " + " | ".join(cells) + " |")
    explained, shown = [], set()
    for c in data["cells"]:
        for stage, st in c["stages"].items():
            for f in st.get("findings", []):
                key = (c["implementation"], f.get("explained_by"), stage)
                if f.get("explained_by") and key not in shown:
                    shown.add(key)
                    explained.append("- " + finding_line(c, stage, f))
    if explained:
        lines += ["", f"<details><summary>Explained divergences ({len(explained)}: first block of each "
                  "implementation, registry entry and stage; results.json has them all)</summary>", "",
                  *explained, "", "</details>"]
    matched = matched_registry(data)
    lines += ["", "## Known divergences that explained findings of this run", ""]
    lines += [f"- `{e['id']}` ({e['implementation']} {e['versions']}, stages {', '.join(e['stages'])}): {e['explanation']}"
              for e in matched] or ["none (the other registry entries, in results.json `registry`, matched nothing here)"]
    return "\n".join(lines) + "\n"


def _cell(c) -> str:
    gs = "" if c["global_scale"] is None else f" gs={c['global_scale']:g}"
    return f"{c['format']} {c['scale_mode']} {c['rounding']} {c['dtype']}{gs}"


# Verdict of a heatmap cell -> colour (the colour never says "fine" about an unexplained divergence).
VERDICT_COLOURS = {"exact": "#4a9a4a", "explained": "#e0b040", "unexplained": "#c44e52", "not run": "#d8d8d8"}


def cell_verdict(m: int, n: int, u: int, err: bool) -> str:
    if err or u:
        return "unexplained"
    if n == 0:
        return "not run"
    return "exact" if m == n else "explained"


def heatmap(path, data: dict):
    """One row per implementation, one column per (format, stage); the colour
    is the verdict (VERDICT_COLOURS), the text the match rate."""
    agg = aggregate(data)
    if not agg:  # every implementation skipped: nothing to plot
        return None
    fig = hr._figure()
    if fig is None:
        return None
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    order = list(VERDICT_COLOURS)
    impls = [i["name"] for i in data["implementations"]]
    fmts = sorted({k[1] for k in agg}, key=lambda f: f)
    cols = [(f, s) for f in fmts for s in STAGES]
    grid, texts = [], []
    for impl in impls:
        row, trow = [], []
        for f, s in cols:
            m, n, u, err = agg.get((impl, f, s), (0, 0, 0, False))
            row.append(order.index(cell_verdict(m, n, u, err)))
            pct = 100 * m / n if n else 0.0
            trow.append("ERR" if err else "" if n == 0 else "100" if m == n else f"{pct:.1f}" if pct < 99.95
                        else ">99.9")
        grid.append(row)
        texts.append(trow)
    fig.set_size_inches(max(8, 0.5 * len(cols) + 3.5), max(3.0, 0.55 * len(impls) + 2.6))
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(grid, cmap=ListedColormap([VERDICT_COLOURS[k] for k in order]), vmin=-0.5, vmax=len(order) - 0.5,
              aspect="auto")
    ax.set_yticks(range(len(impls)))
    ax.set_yticklabels(impls, fontsize=8)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([f"{f}:{s}" for f, s in cols], rotation=60, ha="right", fontsize=7)
    for i, trow in enumerate(texts):
        for j, text in enumerate(trow):
            if text:
                ax.text(j, i, text, ha="center", va="center", fontsize=7,
                        color="white" if order[grid[i][j]] == "unexplained" else "black")
    ax.legend(handles=[Patch(color=VERDICT_COLOURS[k], label=k) for k in order], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=7, title="verdict", title_fontsize=8, frameon=False)
    ax.set_title("conformance vs the reference: colour = verdict, text = % of values matched", fontsize=9)
    return hr._save_png(fig, path)


def write(rd: "hr.ReportDir", data: dict, meta: dict, checks: list | None = None) -> dict:
    """results.json (every cell), summary.md (markdown) and heatmap.png; junit.xml
    is the command's (one case per implementation and cell, harness/commands/conform.py)."""
    written = {
        "results": rd.write_json("results.json", {"meta": meta, **data, "results": list(checks or [])}),
        "summary": rd.write_text("summary.md", markdown(data, meta)),
    }
    png = heatmap(rd._target("heatmap.png"), data)
    if png is not None:
        written["heatmap"] = png
    return written
