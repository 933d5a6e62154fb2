"""Run reports: results.json, summary.md (a Buildkite annotation), JUnit XML, PNG plots.

Every file is written atomically (temporary file in the same folder, fsync,
os.replace), so a reader -- or a run killed half way -- never sees a torn file:
it sees the old content or the new one. The temporary file lives in the
target's own folder: a rename is atomic only within one filesystem.
`ReportDir.record` rewrites results.json (and, given a title, summary.md and
junit.xml) after every finished check, so an interrupted run keeps what
finished. `latest` is replaced the same way: a new link made under a
temporary name, then renamed over the old one.

This module imports nothing of the project: every command can use it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import secrets
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

# Buildkite rejects annotation bodies above 1 MiB; stay well below.
ANNOTATION_LIMIT = 900_000

# --------------------------------------------------------------------------
# atomic writes


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write `data` to `path` so that `path` holds either the old or the new bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes 0600 files; reports are read by agents and people, so
        # keep an existing file's mode, else the usual 0644.
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # KeyboardInterrupt included: never leave the temporary file behind.
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Plain JSON data from what checks return (numpy/torch values, paths, dataclasses).

    Non-finite floats become the strings "NaN"/"Infinity"/"-Infinity" so the
    file stays strict JSON that any parser (Buildkite, jq) reads.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((to_jsonable(v) for v in obj), key=repr)
    if isinstance(obj, Path):
        return str(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(asdict(obj))
    # numpy scalars/arrays and torch tensors: duck-typed so neither is imported here.
    if hasattr(obj, "tolist"):
        return to_jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    raise TypeError(f"cannot write {type(obj).__name__} to JSON: {obj!r:.200}")


def atomic_write_json(path, obj: Any) -> Path:
    # Serialise fully before touching the file: a bad value leaves the old file.
    text = json.dumps(to_jsonable(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"
    return atomic_write_text(path, text)


# --------------------------------------------------------------------------
# report folders


def _utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


_KIND_RE = re.compile(r"[^A-Za-z0-9._-]+")


class ReportRootError(ValueError):
    """The reports root cannot hold reports; the message is one line naming it."""


def check_root(root, option: str = "--reports") -> Path:
    """Make sure `root` is (or can become) a writable folder, before a run spends any time."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ReportRootError(f"{option} {root}: exists and is not a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportRootError(f"{option} {root}: cannot create the folder: {e.strerror or e}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ReportRootError(f"{option} {root}: not writable")
    return root


class ReportDir:
    """One run's folder, reports/<UTC timestamp>-<kind>/."""

    def __init__(self, path):
        self.path = Path(path)
        self.root = self.path.parent
        self._results: list[dict] = []

    @classmethod
    def create(cls, kind: str, root="reports") -> "ReportDir":
        """Make a new, unique folder; parallel jobs starting in the same second each get their own."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        kind = _KIND_RE.sub("-", kind).strip("-") or "run"
        base = f"{_utc_stamp()}-{kind}"
        for n in range(1, 10_000):
            path = root / (base if n == 1 else f"{base}-{n}")
            try:
                path.mkdir()  # atomic: fails if another process took the name
            except FileExistsError:
                continue
            return cls(path)
        raise RuntimeError(f"could not make a unique report folder under {root}")

    # -- files

    def _target(self, name) -> Path:
        target = (self.path / name).resolve()
        if not target.is_relative_to(self.path.resolve()):
            raise ValueError(f"report file {name!r} is outside {self.path}")
        return target

    def write_json(self, name, obj) -> Path:
        return atomic_write_json(self._target(name), obj)

    def write_text(self, name, text: str) -> Path:
        return atomic_write_text(self._target(name), text)

    def write_bytes(self, name, data: bytes) -> Path:
        return atomic_write_bytes(self._target(name), data)

    def update_latest(self) -> Path:
        """Point <root>/latest at this folder; the old link is replaced in one rename."""
        link = self.root / "latest"
        # pid and a random part: two runs (other hosts or pid namespaces on one
        # shared folder included) never share the temporary name
        tmp = self.root / f".latest.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        # Relative target: the reports folder stays valid when copied or mounted elsewhere.
        os.symlink(self.path.name, tmp)
        try:
            os.replace(tmp, link)
        except BaseException:
            # The old link is untouched; do not leave the new one lying about.
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
            raise
        return link

    # -- incremental results (an interrupted run keeps what finished)

    def record(self, result: Mapping[str, Any], meta: Mapping[str, Any] | None = None,
               title: str | None = None, suite_name: str | None = None) -> None:
        """Append one finished result and rewrite results.json at once; with a
        `title`, summary.md and junit.xml too (all three always agree)."""
        self._results.append(dict(result))
        if title is None:
            self.write_json("results.json", {"meta": dict(meta or {}), "results": self._results})
        else:
            self.write_files(title, None, meta, suite_name)

    def write_report(
        self,
        title: str,
        results: Sequence[Mapping[str, Any]] | None = None,
        meta: Mapping[str, Any] | None = None,
        suite_name: str | None = None,
    ) -> dict[str, Path]:
        """Write results.json, summary.md and junit.xml for `results` (default: recorded ones),
        then upload to Test Engine (once, at the end of a run)."""
        results = list(self._results if results is None else results)
        written = self.write_files(title, results, meta, suite_name)
        upload_test_engine(suite_name or title, [result_to_case(r) for r in results])
        return written

    def write_files(
        self,
        title: str,
        results: Sequence[Mapping[str, Any]] | None = None,
        meta: Mapping[str, Any] | None = None,
        suite_name: str | None = None,
    ) -> dict[str, Path]:
        """The three report files, each written atomically."""
        results = list(self._results if results is None else results)
        meta = dict(meta or {})
        return {
            "results": self.write_json("results.json", {"meta": meta, "results": results}),
            "summary": self.write_text("summary.md", summary_markdown(title, results, meta)),
            "junit": self.write_text(
                "junit.xml", junit_xml(suite_name or title, [result_to_case(r) for r in results])
            ),
        }


# --------------------------------------------------------------------------
# JUnit XML

# XML 1.0 forbids most control characters; a stray byte from a log must not
# make the whole file unreadable to Buildkite's junit-annotate.
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = _format_value(value)
    return _XML_BAD.sub("?", value)


def result_to_case(result: Mapping[str, Any], classname: str = "moe_harness") -> dict:
    """A summary result {name, passed, details, message} as a JUnit case."""
    return {
        "name": result.get("name", "?"),
        "classname": result.get("classname", classname),
        "time": result.get("time", 0.0),
        "passed": result.get("passed"),
        "skipped": result.get("skipped", False),
        "message": result.get("message", ""),
        "details": result.get("details", ""),
    }


def junit_xml(suite_name: str, cases: Iterable[Mapping[str, Any]]) -> str:
    """JUnit XML for cases {name, classname, time, passed, message, details[, skipped]}."""
    cases = list(cases)
    failures = sum(1 for c in cases if not c.get("skipped") and not c.get("passed"))
    skipped = sum(1 for c in cases if c.get("skipped"))
    total_time = sum(float(c.get("time") or 0.0) for c in cases)
    root = ET.Element("testsuites")
    suite = ET.SubElement(
        root,
        "testsuite",
        name=_xml_text(suite_name),
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{total_time:.3f}",
    )
    for c in cases:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=_xml_text(c.get("classname") or suite_name),
            name=_xml_text(c.get("name", "?")),
            time=f"{float(c.get('time') or 0.0):.3f}",
        )
        details = _xml_text(c.get("details"))
        if c.get("skipped"):
            ET.SubElement(case, "skipped", message=_xml_text(c.get("message")))
        elif not c.get("passed"):
            fail = ET.SubElement(case, "failure", message=_xml_text(c.get("message") or "failed"))
            fail.text = details
        elif details:
            ET.SubElement(case, "system-out").text = details
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --------------------------------------------------------------------------
# summary markdown (a Buildkite annotation body)

# Details that carry the reproducer are shown first and in full.
_REPRO_KEYS = ("falsifying_example", "example", "shrunk_example", "config", "reproduce", "command", "log_tail", "failure")


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(to_jsonable(value), indent=2)
    except TypeError:
        return repr(value)


def _fence(text: str) -> str:
    # A longer fence than any backtick run inside keeps the block closed.
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _cell(value: Any) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(to_jsonable(value))
        except TypeError:
            text = repr(value)
    text = text.replace("\n", " ")
    text = text.replace("|", "\\|")
    return text if len(text) <= 120 else text[:117] + "..."


def _status(r: Mapping[str, Any]) -> str:
    if r.get("skipped"):
        return "skipped"
    return "passed" if r.get("passed") else "failed"


def summary_markdown(
    title: str, results: Sequence[Mapping[str, Any]], meta: Mapping[str, Any] | None = None
) -> str:
    """Markdown for a Buildkite annotation: counts, then every failure with its
    reproducer, then passes, then the run's facts (command, seed, device...)
    folded: a reader sees what failed first."""
    results = list(results)
    failed = [r for r in results if _status(r) == "failed"]
    skipped = [r for r in results if _status(r) == "skipped"]
    passed = [r for r in results if _status(r) == "passed"]
    icon = ":x:" if failed else ":white_check_mark:"
    out = [f"## {icon} {title}", ""]
    counts = f"**{len(failed)} failed**, {len(passed)} passed"
    if skipped:
        counts += f", {len(skipped)} skipped"
    out += [counts, ""]
    meta = dict(meta or {})
    if meta.get("interrupted"):
        out += [f"**Interrupted** ({meta.get('signal') or 'signal'}): only the checks that finished are listed.", ""]
    elif meta.get("finished") is False:
        out += ["**In progress**: the checks that have finished so far.", ""]
    if failed:
        out += ["### Failures", ""]
        for r in failed:
            out.append(f"#### :x: {r.get('name', '?')}")
            if r.get("message"):
                out += ["", _fence(str(r["message"]))]
            details = dict(r.get("details") or {})
            repro = [k for k in _REPRO_KEYS if k in details]
            for k in repro:
                out += ["", f"**{k}**", "", _fence(_format_value(details.pop(k)))]
            if details:
                out += ["", "| detail | value |", "|---|---|"]
                out += [f"| {_cell(k)} | {_cell(v)} |" for k, v in details.items()]
            out.append("")
    if passed or skipped:
        out += ["<details><summary>Passed and skipped</summary>", ""]
        out += ["| check | status | details |", "|---|---|---|"]
        for r in passed + skipped:
            d = r.get("details") or {}
            short = ", ".join(f"{k}={_cell(v)}" for k, v in list(d.items())[:4]) if isinstance(d, Mapping) else _cell(d)
            out.append(f"| {_cell(r.get('name', '?'))} | {_status(r)} | {short} |")
        out += ["", "</details>", ""]
    if meta:
        out += ["<details><summary>Run</summary>", "", "| | |", "|---|---|"]
        out += [f"| {_cell(k)} | {_cell(v)} |" for k, v in meta.items()]
        out += ["", "</details>", ""]
    text = "\n".join(out)
    if len(text.encode("utf-8")) > ANNOTATION_LIMIT:
        # Failures come first, so cutting the tail keeps what a reader needs.
        text = text.encode("utf-8")[:ANNOTATION_LIMIT].decode("utf-8", "ignore")
        text += "\n\n... (truncated; see results.json)\n"
    return text


# --------------------------------------------------------------------------
# plots (matplotlib's Agg canvas directly: no pyplot global state, no display)


def _figure():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        print("moe-harness report: matplotlib is not installed; plots skipped", file=sys.stderr)
        return None
    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save_png(fig, path) -> Path:
    import io

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return atomic_write_bytes(path, buf.getvalue())


def plot_bars(path, labels, values, errors=None, title: str = "", ylabel: str = "") -> Path | None:
    """Bar chart (e.g. accuracy per scheme), with optional error bars."""
    fig = _figure()
    if fig is None:
        return None
    ax = fig.add_subplot(1, 1, 1)
    labels = [str(x) for x in labels]
    values = [float(v) for v in to_jsonable(values)]
    yerr = None if errors is None else [float(e) for e in to_jsonable(errors)]
    ax.bar(range(len(values)), values, yerr=yerr, capsize=3 if yerr else 0, color="#4878a8")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    return _save_png(fig, path)


def plot_hist(path, series: Mapping[str, Any], title: str = "", xlabel: str = "", bins: int = 50, logy: bool = False) -> Path | None:
    """Overlaid histograms (e.g. quantization error per format); non-finite values are dropped and counted."""
    fig = _figure()
    if fig is None:
        return None
    ax = fig.add_subplot(1, 1, 1)
    for name, data in series.items():
        flat = _flatten(to_jsonable(data))
        finite = [v for v in flat if isinstance(v, (int, float)) and math.isfinite(v)]
        dropped = len(flat) - len(finite)
        label = f"{name} (n={len(finite)}" + (f", {dropped} non-finite)" if dropped else ")")
        if finite:
            ax.hist(finite, bins=bins, alpha=0.5, label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    if logy:
        ax.set_yscale("log")
    if series:
        ax.legend(fontsize=8)
    return _save_png(fig, path)


def _flatten(data) -> list:
    if isinstance(data, list):
        out = []
        for v in data:
            out.extend(_flatten(v))
        return out
    return [data]


# --------------------------------------------------------------------------
# Buildkite Test Engine


def upload_test_engine(suite_name: str, cases: Iterable[Mapping[str, Any]], env: Mapping[str, str] | None = None) -> bool:
    """Send cases to Buildkite Test Engine when BUILDKITE_ANALYTICS_TOKEN is set.

    Returns False, printing nothing, without a token. pytest steps need no
    call: the buildkite-test-collector pytest plugin uploads those itself.
    A failed upload is a warning on stderr, never a failed run.
    """
    env = os.environ if env is None else env
    if not env.get("BUILDKITE_ANALYTICS_TOKEN"):
        return False
    try:
        from datetime import timedelta
        from uuid import uuid4

        from buildkite_test_collector.collector.api import API
        from buildkite_test_collector.collector.instant import Instant
        from buildkite_test_collector.collector.payload import Payload, TestData, TestHistory
        from buildkite_test_collector.collector.run_env import RunEnvBuilder
    except ImportError as exc:
        print(f"moe-harness report: Test Engine upload skipped ({exc})", file=sys.stderr)
        return False
    start = Instant(0.0)
    payload = Payload.init(RunEnvBuilder(env).build()).started()
    payload = Payload(run_env=payload.run_env, data=(), started_at=start, finished_at=None)
    clock = 0.0
    for c in cases:
        seconds = float(c.get("time") or 0.0)
        history = TestHistory(
            start_at=start + timedelta(seconds=clock),
            end_at=start + timedelta(seconds=clock + seconds),
            duration=timedelta(seconds=seconds),
        )
        clock += seconds
        data = TestData(
            id=uuid4(),
            scope=str(c.get("classname") or suite_name),
            name=str(c.get("name", "?")),
            history=history,
            location=c.get("location"),
        )
        if c.get("skipped"):
            data = data.skipped()
        elif c.get("passed"):
            data = data.passed()
        else:
            data = data.failed(failure_reason=_xml_text(c.get("message") or "failed")[:1000])
        payload = payload.push_test_data(data)
    responses = list(API(env).submit(payload))
    ok = bool(responses) and all(r is not None for r in responses)
    if not ok:
        print("moe-harness report: Test Engine upload failed (see warnings above)", file=sys.stderr)
    return ok
