"""MoE conformance reports: results.json (everything), summary.md (verdicts
per implementation and check, then every failure with its minimal problem
and verdict) and junit.xml (one case per implementation, check and cell),
each written atomically with harness.util.report."""
from __future__ import annotations

from harness.util import report as hr

from harness.conformance.moe.checks import CHECKS

_FAILING = ("fail", "error")
_SKIPPED = ("not provided", "not applicable")


def _cell(r) -> str:
    c = r["cell"]
    return f"{c['scheme']} {c['routing']} {c['activation']} {c['dtype']}"


def verdict_table(data: dict) -> dict:
    """{(impl, check): text} for the summary's matrix."""
    out = {}
    for impl in data["implementations"]:
        for check in data["checks"]:
            rs = [r for r in data["results"] if r["implementation"] == impl["name"] and r["check"] == check]
            n = {s: sum(1 for r in rs if r["status"] == s) for s in ("pass", "fail", "error", "not provided",
                                                                      "not applicable")}
            if n["fail"] or n["error"]:
                parts = [f"FAIL {n['fail']}" if n["fail"] else "", f"ERROR {n['error']}" if n["error"] else ""]
                out[(impl["name"], check)] = f"**{' '.join(p for p in parts if p)}** of {len(rs)}"
            elif n["pass"]:
                out[(impl["name"], check)] = f"pass {n['pass']}" + (f" (n/a {n['not applicable']})"
                                                                     if n["not applicable"] else "")
            elif n["not provided"]:
                out[(impl["name"], check)] = "not provided"
            else:
                out[(impl["name"], check)] = "n/a" if rs else ""
    return out


def _evidence(ev: dict) -> str:
    keys = [k for k in ("index", "got", "expected", "tolerance", "expected_without_act_qdq", "calls", "expected",
                        "missing", "keys", "modified", "off_device") if k in ev]
    seen, parts = set(), []
    for k in keys:
        if k not in seen:
            seen.add(k)
            parts.append(f"{k} {ev[k]!r}")
    return "; ".join(parts)


def markdown(data: dict, meta: dict) -> str:
    lines = ["# moe-harness conform --moe", ""]
    status = "FAILED: a bug-class check fails" if data["failed"] else "passed (every check that applies holds)"
    lines += [f"**{status}** -- seed {data['seed']}, device {data['device']}, command `{meta.get('command', '')}`",
              ""]
    if data["skipped"]:
        lines += ["## Skipped implementations", ""] + [f"- `{s['name']}`: {s['reason']}" for s in data["skipped"]]
        lines.append("")
    table = verdict_table(data)
    lines += ["## Verdicts (cells per implementation and check)", "",
              "| implementation | version | " + " | ".join(data["checks"]) + " |",
              "|---|---|" + "---|" * len(data["checks"])]
    for impl in data["implementations"]:
        lines.append(f"| {impl['name']} | {impl['version']} | "
                     + " | ".join(table[(impl["name"], c)] for c in data["checks"]) + " |")
    lines += ["", "## Failures (minimal problem, float64 reference, tolerance, verdict)", ""]
    failing = [r for r in data["results"] if r["status"] in _FAILING]
    for r in failing:
        head = f"- **{r['implementation']}** `{r['check']}` [{_cell(r)}] {r['status'].upper()}: {r['message']}"
        lines.append(head)
        if r.get("minimal_problem"):
            lines.append(f"  - minimal problem: `{r['minimal_problem']}` (from `{r['problem']}`, "
                         f"{r['shrink_calls']} shrink steps)")
        elif r.get("problem"):
            lines.append(f"  - problem: `{r['problem']}`")
        ev = r.get("evidence") or {}
        if r["status"] == "fail":
            lines.append(f"  - verdict: **{ev.get('verdict', '')}**; {_evidence(ev)}")
        elif ev.get("traceback"):
            lines.append(f"  - traceback tail: `{ev['traceback'].strip().splitlines()[-1][:300]}`")
    if not failing:
        lines.append("none")
    lines += ["", "## Checks", "", "| check | bug class | hook it needs |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.bug_class} | {c.hook or '(black box)'} |" for c in CHECKS if c.name in data["checks"]]
    return "\n".join(lines) + "\n"


def junit_cases(data: dict) -> list:
    cases = []
    for r in data["results"]:
        ev = r.get("evidence") or {}
        details = ""
        if r["status"] in _FAILING:
            details = "\n".join(x for x in (r.get("minimal_problem") and f"minimal problem: {r['minimal_problem']}",
                                            _evidence(ev), ev.get("traceback", "")) if x)
        cases.append({"name": f"{r['check']} [{_cell(r)}]", "classname": f"moe_conform.{r['implementation']}",
                      "time": r.get("seconds", 0.0), "passed": r["status"] not in _FAILING,
                      "skipped": r["status"] in _SKIPPED, "message": r.get("message", ""), "details": details})
    return cases


def write(rd: "hr.ReportDir", data: dict, meta: dict) -> dict:
    return {
        "results": rd.write_json("results.json", {"meta": meta, **data}),
        "summary": rd.write_text("summary.md", markdown(data, meta)),
        "junit": rd.write_text("junit.xml", hr.junit_xml("moe-harness conform --moe", junit_cases(data))),
    }
