"""What `moe-harness conform` says: per failing cell
the verdict and the minimal block on the terminal, as summary.md has them;
summary.md lists only the registry entries this run matched; the heatmap's
colour is the verdict (a 99% cell with unexplained divergences is red); the
pytest plugin's AssertionError is the verdict plus the minimal block, with
no arrays and no internal frames; the plugin silences buildkite-test-collector's
missing-token warning in downstream runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.conformance import report as conf_report
from harness.conformance.check import check
from suites.conformance import planted

REPO = Path(__file__).resolve().parents[2]
PLANTED = "suites.conformance.planted:ties_away"


@pytest.fixture(scope="module")
def ties_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("conform")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "conform", "--impl", PLANTED, "--formats", "mxfp4",
                        "--random-blocks", "8", "--reports", str(root)], capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=600)
    return r, root / "latest"


def test_terminal_names_the_verdict_and_the_minimal_block_of_each_failing_cell(ties_run):
    r, folder = ties_run
    assert r.returncode == 1, r.stderr
    fails = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL  ties-away mxfp4")]
    assert fails and all("verdict: implementation wrong" in ln and "minimal block (1 nonzero of 32)" in ln
                         for ln in fails), r.stdout
    summary = (folder / "summary.md").read_text()
    for ln in fails:   # the same words as summary.md, without the markdown
        body = ln[len("FAIL  "):]
        assert any(conf_report.plain(s[2:]) == body for s in summary.splitlines() if s.startswith("- ")), body


def test_summary_lists_only_the_registry_entries_this_run_matched(ties_run):
    _, folder = ties_run
    summary = (folder / "summary.md").read_text()
    data = json.loads((folder / "results.json").read_text())
    assert data["registry"], "the shipped registry has entries"
    assert not any(f"`{e['id']}`" in summary for e in data["registry"])
    assert summary.index("## Unexplained divergences") < summary.index("## Match rates")
    assert len(summary.encode()) < 4000
    assert data["results"] and all("name" in c for c in data["results"])   # the convention's checks
    assert "<testcase" in (folder / "junit.xml").read_text()


def test_heatmap_colour_is_the_verdict(ties_run):
    from matplotlib.image import imread

    assert conf_report.cell_verdict(99, 100, 1, False) == "unexplained"
    assert conf_report.cell_verdict(99, 100, 0, False) == "explained"
    assert conf_report.cell_verdict(100, 100, 0, False) == "exact"
    _, folder = ties_run
    img = imread(folder / "heatmap.png")[..., :3]
    red = tuple(int(conf_report.VERDICT_COLOURS["unexplained"][i:i + 2], 16) / 255 for i in (1, 3, 5))
    hits = ((abs(img - red) < 2 / 255).all(axis=-1)).sum()
    assert hits > 1000, hits     # the 99.x% codes and qdq cells are drawn red, not green


def test_plugin_message_is_the_verdict_and_the_minimal_block():
    with pytest.raises(AssertionError) as e:
        check(planted.ties_away_qdq, "mxfp4", "floor", random_blocks=8)
    text = str(e.value)
    lines = text.splitlines()
    assert "verdict: implementation wrong" in text and "minimal block (1 nonzero of 32)" in text
    assert len(lines) <= 14 and all(ln.count(",") < 8 for ln in lines), text   # no 32-element arrays
    shown = e.traceback.filter(e)   # what pytest prints: frames marked __tracebackhide__ dropped
    assert not any(Path(str(entry.path)) == Path(check.__code__.co_filename) for entry in shown)


def test_downstream_pytest_ends_without_the_collector_token_warning(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_a(conformance):\n    assert conformance.check\n")
    env = {k: v for k, v in os.environ.items() if k != "BUILDKITE_ANALYTICS_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_x.py")],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BUILDKITE_ANALYTICS_TOKEN" not in r.stdout + r.stderr


def test_conform_in_process_records_one_check_per_cell(tmp_path, capsys):
    rc = cli.main(["conform", "--impl", "reference", "--formats", "mxfp8_e4m3", "--random-blocks", "4",
                   "--reports", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert len(data["results"]) == len(data["cells"]) > 0 and all(c["passed"] for c in data["results"])
