"""junit-annotate: JUnit files from a build become one annotation, failures first, shrunk examples shown."""

import json

from harness.util import report
from harness.pipelines import junit_annotate

FAILURE_TEXT = """self = <test>
E   AssertionError: mismatch
Falsifying example: test_qdq_matches_reference(
    fmt='nvfp4',
    x=tensor([448.0, 0.0]),
)
more output
"""


def _junit(path, cases):
    path.write_text(report.junit_xml("s", cases))


def test_falsifying_example_is_extracted():
    ex = junit_annotate.falsifying_example(FAILURE_TEXT)
    assert ex.startswith("Falsifying example: test_qdq_matches_reference(")
    assert ex.endswith(")") and "x=tensor([448.0, 0.0])" in ex and "more output" not in ex


def test_annotation_lists_failures_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-agent"))  # no buildkite-agent: the body is printed
    _junit(tmp_path / "a.xml", [
        {"name": "test_ok", "classname": "suite", "time": 0.1, "passed": True, "message": "", "details": ""},
        {"name": "test_bad", "classname": "suite", "time": 0.1, "passed": False, "message": "mismatch",
         "details": FAILURE_TEXT},
    ])
    (tmp_path / "broken.xml").write_text("<testsuites><testcase")
    rc = junit_annotate.annotate([str(tmp_path / "*.xml")], reports_root=tmp_path / "reports")
    out = capsys.readouterr().out
    assert rc == 0
    assert out.index("test_bad") < out.index("test_ok")
    assert "x=tensor([448.0, 0.0])" in out
    assert "not readable JUnit XML" in out  # a broken file is reported, not fatal
    written = json.loads(next((tmp_path / "reports").glob("*-junit-annotate/results.json")).read_text())
    assert sum(not r["passed"] for r in written["results"]) == 2
