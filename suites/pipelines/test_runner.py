"""The local runner, end to end on fixtures/run/pipeline.yml (trivial commands, a few seconds)."""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.commands import pipeline as command

RUN_DIR = Path(__file__).parent / "fixtures" / "run"
REPO = Path(__file__).resolve().parents[2]


def run_cli(*argv) -> int:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return command.main(parser.parse_args(list(argv)))


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    shutil.copy(RUN_DIR / "pipeline.yml", root / "pipeline.yml")
    rc = run_cli("run", str(root / "pipeline.yml"), "--target", "cpu", "--root", str(root),
                 "--minute-seconds", "0.5", "--grace-seconds", "0.5", "--jobs", "3")
    report = (root / "reports" / "latest").resolve()
    data = json.loads((report / "results.json").read_text())
    by_name = {r["name"]: r for r in data["results"]}
    return rc, root, report, by_name


def test_failing_step_fails_the_run(fixture_run):
    rc, _, _, by = fixture_run
    assert rc == 1
    assert by["broken"]["state"] == "failed" and by["broken"]["details"]["exit_status"] == 7


def test_env_layers_reach_the_command(fixture_run):
    _, root, _, by = fixture_run
    assert by["prep"]["state"] == "passed"
    assert (root / "out" / "prep.txt").read_text() == "prep from-pipeline from-step"


def test_parallelism_starts_one_process_per_job(fixture_run):
    _, root, _, by = fixture_run
    for j in range(3):
        assert by[f"shards[{j}]"]["state"] == "passed"
        assert (root / "out" / f"shard-{j}-of-3.txt").read_text() == f"shard {j}"  # %n in the label


def test_artifacts_are_collected_and_downloadable(fixture_run):
    _, root, report, _ = fixture_run
    assert (report / "artifacts" / "shards#1" / "out" / "shard-1-of-3.txt").is_file()
    assert (root / "out" / "downloaded-count.txt").read_text().strip() == "3"


def test_retry_rule_retries_then_passes(fixture_run):
    by = fixture_run[3]
    assert by["flaky"]["state"] == "passed"
    assert by["flaky"]["details"]["exit_statuses"] == [255, 0]


def test_soft_fail_does_not_fail(fixture_run):
    by = fixture_run[3]
    assert by["soft"]["state"] == "soft_failed" and by["soft"]["passed"] is True


def test_dependency_failure_blocks_unless_allowed(fixture_run):
    _, root, _, by = fixture_run
    assert by["after-broken"]["state"] == "broken"
    assert not (root / "out" / "after-broken-ran").exists()
    assert by["allowed"]["state"] == "passed"
    assert by["blocked-by-wait"]["state"] == "broken"  # a plain wait after failures
    assert not (root / "out" / "blocked-ran").exists()
    assert by["annotate"]["state"] == "passed"  # behind `continue_on_failure: true`


def test_group_runs_its_steps_and_satisfies_dependents(fixture_run):
    by = fixture_run[3]
    assert by["in-group"]["state"] == "passed"
    assert by["after-group"]["state"] == "passed"


def test_other_targets_and_false_conditions_are_skipped(fixture_run):
    _, root, _, by = fixture_run
    assert "cuda-only" not in by and "conditional" not in by
    assert not (root / "out" / "cuda-only-ran").exists()
    assert not (root / "out" / "conditional-ran").exists()


def test_timeout_kills_and_reports_minus_one_then_retries(fixture_run):
    by = fixture_run[3]
    slow = by["slow"]
    assert slow["state"] == "failed"
    assert slow["details"]["exit_statuses"] == [-1, -1]
    assert "timed_out" in slow["details"]
    # the mechanism, not a stopwatch: each attempt's whole process group (sleep included) is gone
    root = fixture_run[1]
    for attempt in (0, 1):
        assert _live_in_group(int((root / "out" / f"slow-{attempt}.pgid").read_text())) == []


def test_report_files(fixture_run):
    _, _, report, _ = fixture_run
    suite = ET.parse(report / "junit.xml").getroot().find("testsuite")
    assert suite.get("failures") == "4"  # broken, after-broken, slow, blocked-by-wait
    summary = (report / "summary.md").read_text()
    assert summary.index("broken") < summary.index("prep")  # failures first
    assert "moe-harness pipeline run" in summary and "--step broken" in summary
    assert "fixture annotation" in summary  # buildkite-agent annotate went into the report
    style = json.loads((report / "annotations" / "fixture.json").read_text())
    assert style["style"] == "info" and style["step"] == "annotate"


def test_step_option_runs_only_that_step(tmp_path):
    shutil.copy(RUN_DIR / "pipeline.yml", tmp_path / "pipeline.yml")
    (tmp_path / "out").mkdir()
    rc = run_cli("run", str(tmp_path / "pipeline.yml"), "--target", "cpu", "--root", str(tmp_path), "--step", "allowed")
    assert rc == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["allowed-ran"]


def test_step_of_another_target_is_refused(tmp_path, capsys):
    shutil.copy(RUN_DIR / "pipeline.yml", tmp_path / "pipeline.yml")
    rc = run_cli("run", str(tmp_path / "pipeline.yml"), "--target", "cpu", "--root", str(tmp_path), "--step", "cuda-only")
    assert rc == 2
    assert "steps[7] (cuda-only): runs on queue 'cuda-h100'" in capsys.readouterr().err


def test_unknown_condition_is_refused_not_guessed(tmp_path, capsys):
    p = tmp_path / "p.yml"
    p.write_text(
        "steps:\n"
        "  - {label: x, key: x, command: 'touch ran', agents: {queue: cpu}, timeout_in_minutes: 1,\n"
        "     if: 'build.pull_request.labels includes \"ci\"'}\n"
    )
    rc = run_cli("run", str(p), "--target", "cpu", "--root", str(tmp_path))
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{p}: steps[0] (x): if:" in err and "build.pull_request.labels" in err
    assert not (tmp_path / "ran").exists() and not (tmp_path / "reports").exists()


def _start_run(tmp_path, fixture, *extra):
    shutil.copy(RUN_DIR / fixture, tmp_path / fixture)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDKITE_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "pipeline", "run", str(tmp_path / fixture), "--target", "cpu",
         "--root", str(tmp_path), *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_for_file(path: Path, proc) -> int:
    """The int a job wrote to `path` (written to a temporary name, then renamed: never half there)."""
    deadline = time.monotonic() + 120  # a condition, not a measurement: generous for a loaded machine
    while not path.exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.05)
    return int(path.read_text())


def _live_in_group(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc independently of the runner."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_keeps_what_finished(tmp_path, sig, code):
    """A signal during a job: the job's whole process group is gone when the runner returns
    (the runner waits for that, not the test), the report keeps the finished step,
    says it was interrupted, and `latest` points at it."""
    proc = _start_run(tmp_path, "interrupt.yml")
    hang_pid = _wait_for_file(tmp_path / "hang.pid", proc)
    pgid = int((tmp_path / "hang.pgid").read_text())
    proc.send_signal(sig)
    out = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == code, out
    assert _live_in_group(pgid) == [] and not _running(hang_pid), out  # no wait here: the runner did it
    report = (tmp_path / "reports" / "latest").resolve()
    data = json.loads((report / "results.json").read_text())
    assert [r["name"] for r in data["results"]] == ["first"]
    assert data["meta"]["interrupted"] is True and data["meta"]["signal"] == sig.name
    assert data["meta"]["killed_jobs"] == ["hang"]
    assert "**Interrupted** (" + sig.name in (report / "summary.md").read_text()
    assert ET.parse(report / "junit.xml").getroot().find("testsuite").get("tests") == "1"
    assert not (tmp_path / "after-ran").exists()
    assert f"interrupted by {sig.name}: partial report" in out and "Traceback" not in out


def test_interrupted_run_starts_no_retry_and_no_waiting_job(tmp_path):
    """Job 0 is killed by the interruption: its retry rule must not start it again, and job 1
    (waiting for its turn under --jobs 1) must not start at all."""
    proc = _start_run(tmp_path, "interrupt_parallel.yml", "--jobs", "1")
    pgid = _wait_for_file(tmp_path / "pgid", proc)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == 143, out
    assert (tmp_path / "started.txt").read_text().split() == ["0"], out
    assert _live_in_group(pgid) == []
    data = json.loads((tmp_path / "reports" / "latest" / "results.json").read_text())
    assert data["results"] == [] and data["meta"]["killed_jobs"] == ["hang#0"]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_between_steps(tmp_path, monkeypatch, sig, code):
    """A signal that lands between two steps (delivered to this process right after the first
    step is recorded): the next step never starts and the report is complete up to there."""
    from harness.pipelines import runner as runner_mod

    shutil.copy(RUN_DIR / "interrupt.yml", tmp_path / "interrupt.yml")
    real = runner_mod.Runner._run_step

    def run_step_then_signal(self, step, meta):
        real(self, step, meta)
        if step.key == "first":
            signal.raise_signal(sig)

    monkeypatch.setattr(runner_mod.Runner, "_run_step", run_step_then_signal)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    rc = run_cli("run", str(tmp_path / "interrupt.yml"), "--target", "cpu", "--root", str(tmp_path))
    assert rc == code
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # handlers restored
    assert not (tmp_path / "hang.pgid").exists() and not (tmp_path / "after-ran").exists()
    data = json.loads((tmp_path / "reports" / "latest" / "results.json").read_text())
    assert [r["name"] for r in data["results"]] == ["first"]
    assert data["meta"]["interrupted"] is True and data["meta"]["killed_jobs"] == []


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait a while for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_an_interrupted_run_gives_its_jobs_sigterm_and_the_grace_period(tmp_path):
    """As an agent cancels: SIGTERM to every running job's group (a `moe-harness run`
    inside marks its report interrupted), then SIGKILL after --grace-seconds."""
    proc = _start_run(tmp_path, "interrupt_graceful.yml", "--jobs", "2", "--grace-seconds", "2")
    deadline = time.monotonic() + 120
    while not ((tmp_path / "ready.0").exists() and (tmp_path / "ready.1").exists()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.05)
    groups = [int((tmp_path / f"pgid.{j}").read_text()) for j in (0, 1)]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == 143, out
    assert (tmp_path / "polite.got").read_text().strip() == "TERM", "the job never got SIGTERM"
    assert time.monotonic() - t0 >= 2, "the stubborn job was not given the grace period"
    assert all(_live_in_group(g) == [] for g in groups), out
