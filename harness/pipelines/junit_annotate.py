"""Turn the JUnit XML of a build into one Buildkite annotation, failures first.

For hypothesis failures the shrunk example ("Falsifying example: ...") is
pulled out of the failure text so the annotation shows it directly.
"""

from __future__ import annotations

import glob
import math
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.util import report

class JUnitError(ValueError):
    """A JUnit file that parses but holds a value no report can carry; one line naming file and test."""


def _seconds(path: Path, name: str, text) -> float:
    if text in (None, ""):
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise JUnitError(f"{path}: testcase {name!r}: time={text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise JUnitError(f"{path}: testcase {name!r}: time={text!r} is not a finite, non-negative number of seconds")
    return value


_FALSIFYING = re.compile(r"^.*Falsifying (?:explicit )?example:.*$", re.M)


def falsifying_example(text: str) -> str | None:
    """The hypothesis reproducer block: from 'Falsifying example:' to its closing ')' line."""
    m = _FALSIFYING.search(text or "")
    if not m:
        return None
    lines = text[m.start():].splitlines()
    out = []
    for line in lines[:60]:
        out.append(line)
        if line.strip() == ")" or (len(out) == 1 and line.rstrip().endswith(")")):
            break
    return "\n".join(out)


def read_cases(path: Path) -> list[dict]:
    """Results (report.summary_markdown form) for every testcase in one JUnit file."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        return [{"name": str(path), "passed": False, "message": f"not readable JUnit XML: {exc}", "details": {"file": str(path)}}]
    out = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '?')}".lstrip(":")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skipped = case.find("skipped") is not None
        r = {"name": name, "passed": bad is None, "skipped": skipped and bad is None,
             "time": _seconds(path, name, case.get("time")), "details": {"file": str(path)}}
        if bad is not None:
            text = bad.text or ""
            r["message"] = bad.get("message") or "failed"
            example = falsifying_example(text) or falsifying_example(r["message"])
            if example:
                r["details"]["falsifying_example"] = example
            r["details"]["failure"] = "\n".join(text.splitlines()[-40:])
        out.append(r)
    return out


def collect(patterns: list[str]) -> tuple[list[Path], list[dict]]:
    files = sorted({Path(f) for p in patterns for f in glob.glob(p, recursive=True) if Path(f).is_file()})
    results = []
    for f in files:
        results.extend(read_cases(f))
    return files, results


def annotate(patterns: list[str], context: str = "junit", reports_root="reports") -> int:
    try:
        files, results = collect(patterns)
    except JUnitError as exc:
        print(f"moe-harness pipeline junit-annotate: {exc}", file=sys.stderr)
        return 2
    failed = [r for r in results if not r["passed"]]
    title = f"JUnit: {len(failed)} failed of {len(results)} tests in {len(files)} files"
    meta = {"files": len(files)}
    body = report.summary_markdown(title, results, meta) if files else "No JUnit XML files were found.\n"
    rd = report.ReportDir.create("junit-annotate", root=reports_root)
    rd.write_report(title, results, meta)
    agent = shutil.which("buildkite-agent")
    if agent:
        style = "error" if failed else ("success" if files else "warning")
        subprocess.run([agent, "annotate", "--style", style, "--context", context], input=body.encode(), check=False)
    else:
        print(body)
    print(f"{title}; report {rd.path}")
    return 0  # the failing steps already fail the build; the annotation step only reports
