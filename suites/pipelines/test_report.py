"""harness.util.report: atomic writes, JUnit XML, summary order, report folders, plots, Test Engine upload."""

import http.server
import json
import os
import threading
import xml.etree.ElementTree as ET

import pytest

from harness.util import report


def _tmp_leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


# ---- atomic writes: an exception mid-write leaves the old file


def test_atomic_write_replaces_content(tmp_path):
    target = tmp_path / "a.txt"
    report.atomic_write_text(target, "old")
    report.atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert _tmp_leftovers(tmp_path) == []


def test_exception_mid_write_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    report.atomic_write_json(target, {"v": 1})

    def boom(fd):
        raise OSError("disk went away")

    # fsync runs after the new bytes are written and before the rename.
    monkeypatch.setattr(report.os, "fsync", boom)
    with pytest.raises(OSError):
        report.atomic_write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1}
    assert _tmp_leftovers(tmp_path) == []


def test_interrupt_mid_write_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "summary.md"
    report.atomic_write_text(target, "old")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(report.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert _tmp_leftovers(tmp_path) == []


def test_unserialisable_json_keeps_old_file(tmp_path):
    target = tmp_path / "r.json"
    report.atomic_write_json(target, {"v": 1})
    with pytest.raises(TypeError, match="object"):
        report.atomic_write_json(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}


def test_json_is_strict_and_takes_numpy():
    np = pytest.importorskip("numpy")
    obj = {"a": np.float32(1.5), "b": np.arange(3), "c": float("nan"), "d": float("-inf")}
    text = json.dumps(report.to_jsonable(obj), allow_nan=False)
    assert json.loads(text) == {"a": 1.5, "b": [0, 1, 2], "c": "NaN", "d": "-Infinity"}


def test_written_files_are_readable_by_others(tmp_path):
    target = report.atomic_write_text(tmp_path / "x.md", "hi")
    assert target.stat().st_mode & 0o044 == 0o044


# ---- JUnit XML


def test_junit_xml_parses_and_counts():
    cases = [
        {"name": "ok", "classname": "c", "time": 0.5, "passed": True, "message": "", "details": ""},
        {"name": "bad <&>", "classname": "c", "time": 1, "passed": False,
         "message": 'x="1" & \x1b[31mred', "details": {"falsifying_example": "f(x=0.0)"}},
        {"name": "skip", "classname": "c", "time": 0, "passed": None, "skipped": True,
         "message": "no gpu", "details": ""},
    ]
    root = ET.fromstring(report.junit_xml("suite", cases))
    suite = root.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "1" and suite.get("skipped") == "1"
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names == ["ok", "bad <&>", "skip"]
    failure = suite.find("testcase[@name='bad <&>']/failure")
    assert "f(x=0.0)" in failure.text
    assert suite.find("testcase[@name='skip']/skipped") is not None


# ---- summary markdown


def test_summary_puts_failures_first_with_reproducer():
    results = [
        {"name": "pass-1", "passed": True, "details": {"n": 1}},
        {"name": "fail-1", "passed": False, "message": "mismatch",
         "details": {"falsifying_example": "qdq(x=tensor([448.0]), fmt='nvfp4')", "max_err": 0.5}},
        {"name": "pass-2", "passed": True, "details": {}},
        {"name": "fail-2", "passed": False, "details": {"config": "suites/lm_eval/configs/tiny-nvfp4.yaml"}},
    ]
    md = report.summary_markdown("Smoke", results, {"target": "cpu"})
    order = [md.index(n) for n in ("fail-1", "fail-2", "pass-1", "pass-2")]
    assert order == sorted(order)
    assert "**2 failed**, 2 passed" in md
    assert "qdq(x=tensor([448.0]), fmt='nvfp4')" in md
    assert "tiny-nvfp4.yaml" in md
    assert md.index("fail-1") < md.index("### Failures") + 50


def test_summary_truncates_below_annotation_limit():
    big = {"name": "f", "passed": False, "message": "x" * (report.ANNOTATION_LIMIT + 10), "details": {}}
    md = report.summary_markdown("Big", [big], {})
    assert len(md.encode()) < report.ANNOTATION_LIMIT + 100
    assert "truncated" in md


# ---- report folders


def test_report_dirs_are_unique_and_latest_moves(tmp_path):
    a = report.ReportDir.create("run", root=tmp_path)
    b = report.ReportDir.create("run", root=tmp_path)
    assert a.path != b.path and a.path.name.endswith("-run")
    a.update_latest()
    assert os.readlink(tmp_path / "latest") == a.path.name
    b.update_latest()
    assert os.readlink(tmp_path / "latest") == b.path.name
    with pytest.raises(ValueError):
        a.write_text("../escape.txt", "no")


def test_record_keeps_finished_results(tmp_path):
    rd = report.ReportDir.create("run", root=tmp_path)
    rd.record({"name": "first", "passed": True, "details": {}})
    rd.record({"name": "second", "passed": False, "details": {}})
    # A run killed here has already written both results.
    data = json.loads((rd.path / "results.json").read_text())
    assert [r["name"] for r in data["results"]] == ["first", "second"]
    paths = rd.write_report("Run", meta={"target": "cpu"})
    assert set(paths) == {"results", "summary", "junit"}
    ET.parse(paths["junit"])


def test_plots_are_png(tmp_path):
    pytest.importorskip("matplotlib")
    bars = report.plot_bars(tmp_path / "acc.png", ["bf16", "nvfp4"], [0.9, 0.85], [0.01, 0.02],
                            title="accuracy", ylabel="acc")
    hist = report.plot_hist(tmp_path / "err.png", {"nvfp4": [0.1, 0.2, float("inf")], "mxfp4": [0.3]},
                            title="error", xlabel="abs error")
    for p in (bars, hist):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- Buildkite Test Engine


def test_test_engine_silent_without_token(capsys):
    assert report.upload_test_engine("s", [{"name": "a", "passed": True}], env={}) is False
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_test_engine_uploads_with_token():
    pytest.importorskip("buildkite_test_collector")
    received = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Authorization"], json.loads(body)))
            self.send_response(202)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            "BUILDKITE_ANALYTICS_TOKEN": "tok",
            "BUILDKITE_ANALYTICS_API_URL": f"http://127.0.0.1:{server.server_port}/v1",
            "BUILDKITE_BUILD_ID": "b1",
        }
        cases = [{"name": "a", "passed": True, "time": 0.1},
                 {"name": "b", "passed": False, "message": "boom", "time": 0.2}]
        assert report.upload_test_engine("suite", cases, env=env) is True
    finally:
        server.shutdown()
    (path, auth, payload), = received
    assert path == "/v1/uploads" and "tok" in auth
    assert [(d["name"], d["result"]) for d in payload["data"]] == [("a", "passed"), ("b", "failed")]


# ---- interrupting a report write between its steps leaves the old state


def test_temporary_file_lives_in_the_target_folder(tmp_path, monkeypatch):
    """A rename is atomic only within one filesystem: the temporary file must sit next to the target."""
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append((os.path.dirname(os.path.abspath(src)), os.path.dirname(os.path.abspath(dst))))
        return real(src, dst)

    monkeypatch.setattr(report.os, "replace", spy)
    sub = tmp_path / "deep" / "er"
    report.atomic_write_text(sub / "summary.md", "x")
    report.atomic_write_json(tmp_path / "results.json", {"a": 1})
    assert seen == [(str(sub), str(sub)), (str(tmp_path), str(tmp_path))]


def test_latest_survives_an_interrupted_update(tmp_path, monkeypatch):
    """`latest` is a new link renamed over the old: interrupted before the rename, the old link
    still points at the old run and no temporary link is left behind."""
    a = report.ReportDir.create("run", root=tmp_path)
    b = report.ReportDir.create("run", root=tmp_path)
    a.update_latest()
    calls = []

    def interrupted_once(src, dst):
        calls.append(dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(report.os, "replace", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        b.update_latest()
    assert calls == [tmp_path / "latest"]  # the step that was cut was the rename over `latest`
    assert os.readlink(tmp_path / "latest") == a.path.name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a.path.name, b.path.name, "latest"])
    monkeypatch.undo()
    b.update_latest()
    assert os.readlink(tmp_path / "latest") == b.path.name


def test_latest_is_never_missing_while_it_moves(tmp_path, monkeypatch):
    """Between making the new link and renaming it, `latest` still resolves (never unlinked first)."""
    a = report.ReportDir.create("run", root=tmp_path)
    b = report.ReportDir.create("run", root=tmp_path)
    a.update_latest()
    seen = []
    real_symlink = os.symlink

    def spy(target, path, *args, **kw):
        seen.append(os.readlink(tmp_path / "latest"))  # what a reader sees just before the new link exists
        return real_symlink(target, path, *args, **kw)

    monkeypatch.setattr(report.os, "symlink", spy)
    b.update_latest()
    assert seen == [a.path.name] and os.readlink(tmp_path / "latest") == b.path.name


def test_record_with_title_writes_all_three_files(tmp_path):
    rd = report.ReportDir.create("run", root=tmp_path)
    rd.record({"name": "first", "passed": True, "details": {}}, {"finished": False}, "Run", "run-suite")
    rd.record({"name": "second", "passed": False, "message": "bad", "details": {}}, {"finished": False}, "Run")
    assert [r["name"] for r in json.loads((rd.path / "results.json").read_text())["results"]] == ["first", "second"]
    suite = ET.parse(rd.path / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    summary = (rd.path / "summary.md").read_text()
    assert "**In progress**" in summary and "second" in summary


def test_interrupted_summary_says_so():
    text = report.summary_markdown("Run", [{"name": "a", "passed": True}], {"interrupted": True, "signal": "SIGTERM"})
    assert "**Interrupted** (SIGTERM)" in text
