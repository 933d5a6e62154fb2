"""Conformance reports: results.json, summary.md and heatmap.png (implementation
x format x stage, colour = match rate), written atomically with harness.util.report."""
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


def markdown(data: dict, meta: dict) -> str:
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
                cells.append("ERROR")
            elif n == 0:
                cells.append("n/a")
            else:
                cells.append(f"{100 * m / n:.2f}%" + (f" ({u} unexplained)" if u else ""))
        lines.append(f"| {impl} | {versions.get(impl, '')} | {fmt} | " + " | ".join(cells) + " |")
    lines += ["", "## Findings (first mismatching block of each kind, shrunk)", "",
              "Unexplained findings are listed for every cell; an explained one once per implementation, "
              "registry entry and stage (results.json has them all).", ""]
    any_finding = False
    shown = set()
    for c in data["cells"]:
        for stage, s in c["stages"].items():
            if s.get("status") == "error":
                lines.append(f"- **{c['implementation']}** {_cell(c)} `{stage}`: ERROR {s['error']}")
                any_finding = True
            for f in s.get("findings", []):
                any_finding = True
                key = (c["implementation"], f.get("explained_by"), stage)
                if f.get("explained_by"):
                    if key in shown:
                        continue
                    shown.add(key)
                why = f"convention difference `{f['explained_by']}`" if f.get("explained_by") else "**UNEXPLAINED**"
                if "error" in f:
                    lines.append(f"- {c['implementation']} {_cell(c)} `{stage}`: {why}; shrinking failed: {f['error']}")
                    continue
                pos = _diff_positions(f)
                diffs = "; ".join(f"[{i}] impl {f['impl'][i]!r} ref {f['reference'][i]!r} spec {f['spec'][i]!r}"
                                  for i in pos)
                real = f.get("real_arithmetic_verdict")
                verdict = f["verdict"] + (f" (NVFP4 convention; in real arithmetic: {real})"
                                          if real and real != f["verdict"] else "")
                lines.append(f"- {c['implementation']} {_cell(c)} `{stage}` ({f['family']}): {why}; verdict: "
                             f"**{verdict}**; minimal block ({f['nonzero']} nonzero of {f['block_size']}): "
                             f"{_fmt_block(f['minimal'])}; {diffs}")
    if not any_finding:
        lines.append("none: every compared value matched the reference")
    lines += ["", "## Registry of known divergences", ""]
    lines += [f"- `{e['id']}` ({e['implementation']} {e['versions']}, stages {', '.join(e['stages'])}): {e['explanation']}"
              for e in data["registry"]]
    return "\n".join(lines) + "\n"


def _cell(c) -> str:
    gs = "" if c["global_scale"] is None else f" gs={c['global_scale']:g}"
    return f"{c['format']} {c['scale_mode']} {c['rounding']} {c['dtype']}{gs}"


def heatmap(path, data: dict):
    """One row per implementation, one column per (format, stage); grey = not run."""
    agg = aggregate(data)
    if not agg:  # every implementation skipped: nothing to plot
        return None
    fig = hr._figure()
    if fig is None:
        return None
    impls = [i["name"] for i in data["implementations"]]
    fmts = sorted({k[1] for k in agg}, key=lambda f: f)
    cols = [(f, s) for f in fmts for s in STAGES]
    grid, flags = [], []
    for impl in impls:
        row = []
        for f, s in cols:
            m, n, u, err = agg.get((impl, f, s), (0, 0, 0, False))
            row.append(0.0 if err else (m / n if n else math.nan))
            flags.append((len(grid), len(row) - 1, bool(u or err)))
        grid.append(row)
    fig.set_size_inches(max(8, 0.45 * len(cols) + 3), max(2.5, 0.6 * len(impls) + 2))
    ax = fig.add_subplot(1, 1, 1)
    import numpy as np
    from matplotlib import colormaps

    cmap = colormaps["RdYlGn"].copy()
    cmap = cmap.with_extremes(bad="#cccccc")
    arr = np.ma.masked_invalid(np.array(grid, dtype=float).reshape(len(impls), len(cols)))
    im = ax.imshow(arr, cmap=cmap, vmin=0.5, vmax=1.0, aspect="auto")
    ax.set_yticks(range(len(impls)))
    ax.set_yticklabels(impls, fontsize=8)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([f"{f}:{s}" for f, s in cols], rotation=60, ha="right", fontsize=7)
    for i, j, bad in flags:
        v = grid[i][j]
        if not math.isnan(v):
            text = (f"{100 * v:.0f}" if v < 1 else "") + ("!" if bad else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label="match rate (clipped at 50%)")
    ax.set_title("conformance: match rate vs the reference (no text = 100%; ! = unexplained divergence)")
    return hr._save_png(fig, path)


def write(rd: "hr.ReportDir", data: dict, meta: dict) -> dict:
    written = {
        "results": rd.write_json("results.json", {"meta": meta, **data}),
        "summary": rd.write_text("summary.md", markdown(data, meta)),
    }
    png = heatmap(rd._target("heatmap.png"), data)
    if png is not None:
        written["heatmap"] = png
    return written
