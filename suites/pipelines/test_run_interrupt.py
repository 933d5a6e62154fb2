"""`moe-harness run`: reports written after every check, interruption (SIGINT and SIGTERM,
during a check and between checks), and what reaches the screen.

The real main loop runs on fake sections (suites/pipelines/fake_run_sections.py, selected
by the test-only HARNESS_RUN_TEST_SECTIONS); no verdict depends on timing: waits are on
files appearing, with generous deadlines.
"""

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDKITE", "HARNESS_"))}
    env.update(PYTHONPATH=str(REPO), HARNESS_RUN_TEST_SECTIONS="suites.pipelines.fake_run_sections",
               HARNESS_FAKE_DIR=str(tmp_path), **extra)
    return env


def _start(tmp_path, *sections, flags=(), **env):
    argv = [sys.executable, "-m", "harness.cli", "run", "--reports", str(tmp_path / "reports"), *flags]
    for s in sections:
        argv += ["--only", s]
    return subprocess.Popen(argv, cwd=tmp_path, env=_env(tmp_path, **env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc):
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _report(tmp_path):
    folder = (tmp_path / "reports" / "latest").resolve()
    data = json.loads((folder / "results.json").read_text())
    return folder, data


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_signal_during_a_check(tmp_path, sig, code):
    proc = _start(tmp_path, "formats", "lmeval", "kernels")
    deadline = time.monotonic() + 120
    while not (tmp_path / "child.pid").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    child = int((tmp_path / "child.pid").read_text())
    proc.send_signal(sig)
    rc, out, err = _finish(proc)
    assert rc == code, (out, err)
    assert not _alive(child)  # the check's own cleanup ran: the signal became an exception, not a death
    folder, data = _report(tmp_path)
    assert [r["name"] for r in data["results"]] == ["fake/ok", "fake/bad", "fake/lmeval"]
    assert data["meta"]["interrupted"] is True and data["meta"]["signal"] == sig.name
    assert data["meta"]["finished"] is False and data["meta"]["passed"] is False
    assert f"**Interrupted** ({sig.name})" in (folder / "summary.md").read_text()
    assert ET.parse(folder / "junit.xml").getroot().find("testsuite").get("tests") == "3"
    lines = err.strip().splitlines()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert lines[-1] == (f"moe-harness run: interrupted by {sig.name} after 3 checks; "
                         f"partial report: {folder}/summary.md")


@pytest.mark.parametrize("sig, code", SIGNALS)
def test_signal_between_checks(tmp_path, sig, code):
    proc = _start(tmp_path, "formats", "moe", "lmeval", HARNESS_FAKE_SIGNAL=sig.name)
    rc, out, err = _finish(proc)
    assert rc == code, (out, err)
    folder, data = _report(tmp_path)
    assert [r["name"] for r in data["results"]] == ["fake/ok", "fake/bad", "fake/before-signal"]
    assert data["meta"]["interrupted"] is True
    assert ET.parse(folder / "junit.xml").getroot().find("testsuite").get("tests") == "3"
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"moe-harness run: interrupted by {sig.name}")


@pytest.mark.slow
def test_every_check_is_on_disk_before_the_next_starts_and_noise_goes_to_the_log(tmp_path):
    rc, out, err = _finish(_start(tmp_path, "formats", "lmeval"))
    assert rc == 1, (out, err)  # fake/bad fails
    seen = json.loads((tmp_path / "after-first.json").read_text())
    assert seen["results"] == ["fake/ok"]
    assert "fake/ok" in seen["summary"] and "**In progress**" in seen["summary"]
    assert 'tests="1"' in seen["junit"]
    folder, data = _report(tmp_path)
    assert data["meta"]["finished"] is True and data["meta"]["interrupted"] is False
    # verdicts as they finish, with the time a check took; the progress line; the user's warning
    assert "PASS  formats   fake/ok" in out and "FAIL  formats   fake/bad" in out and "wrong on purpose" in out
    assert "PASS  lmeval    fake/lmeval" in out and "(0.2s)" in out
    assert "fake progress: task 3/3 items" in out
    assert "your config sets something odd" in err
    log = (folder / "third_party.log").read_text()
    for noise in ("fakelib deprecation noise", "lm_eval aggregation notice", "_C_mxfp8.so"):
        assert noise not in out + err and noise in log
    assert f"third-party library output (warnings, logs, progress): {folder}/third_party.log" in out


def test_quiet_prints_failures_and_the_summary(tmp_path):
    rc, out, err = _finish(_start(tmp_path, "formats", "lmeval", flags=["--quiet"]))
    assert rc == 1
    assert "FAIL  formats   fake/bad" in out and "1 passed" not in out and "2 passed, 1 failed" in out
    assert "PASS" not in out and "fake progress" not in out and "_C_mxfp8" not in out + err


def test_verbose_shows_library_output(tmp_path):
    rc, out, err = _finish(_start(tmp_path, "formats", "lmeval", flags=["--verbose"]))
    assert rc == 1
    assert "lm_eval aggregation notice" in err and "_C_mxfp8.so" in err
    assert not (_report(tmp_path)[0] / "third_party.log").exists()


def test_quiet_and_verbose_exclude_each_other(capsys):
    from harness import cli

    with pytest.raises(SystemExit) as exc:
        cli.build_parser(["run"]).parse_args(["run", "--quiet", "--verbose"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_what_counts_as_third_party():
    import sysconfig

    from harness.util import noise

    site = sysconfig.get_paths()["purelib"]
    assert noise.is_third_party_file(os.path.join(site, "torchao", "__init__.py"))
    assert noise.is_third_party_file(os.path.join(sysconfig.get_paths()["stdlib"], "warnings.py"))
    assert noise.is_third_party_file("<frozen importlib._bootstrap>")
    assert not noise.is_third_party_file(str(REPO / "harness" / "lmeval" / "config.py"))
    assert not noise.is_third_party_file("/home/someone/my_eval_script.py")  # the user's own code


def test_catch_signals_raises_once_then_only_notes():
    from harness.util import interrupt

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with interrupt.catch_signals() as guard:
        with pytest.raises(interrupt.Interrupted) as exc:
            signal.raise_signal(signal.SIGTERM)
        assert exc.value.exit_code == 143 and exc.value.name == "SIGTERM"
        signal.raise_signal(signal.SIGINT)  # during cleanup: noted, not raised
        assert guard.fired == [signal.SIGTERM, signal.SIGINT]
    with interrupt.catch_signals() as guard:
        guard.shield()  # the last report writes
        signal.raise_signal(signal.SIGINT)
        assert guard.fired == [signal.SIGINT]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert interrupt.exit_code(KeyboardInterrupt()) == 130
