"""Each implementation runs in its own child process with a time limit, gets
its own copy of the inputs, and has its input checked unchanged after each
call: an implementation that mutates its input, exits, crashes, hangs or
floods its output gets its own FAIL with the reason, while the others keep
their verdicts and the report is written."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from suites.interrupting import interrupt, start, wait_until


ROOT = Path(__file__).resolve().parents[2]
H = "suites.conformance.hostile:"
BUGGY = "suites.conformance.planted:ties_away"


def conform(tmp_path, *impls, extra=(), timeout=300):
    """`moe-harness conform` in a fresh interpreter (an implementation may kill
    its process); returns (rc, stdout, stderr, results.json or None)."""
    args = [sys.executable, "-m", "harness.cli", "conform", "--formats", "mxfp4", "--random-blocks", "16",
            "--reports", str(tmp_path / "reports"), *extra]
    for i in impls:
        args += ["--impl", i]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    res = tmp_path / "reports" / "latest" / "results.json"
    return p.returncode, p.stdout, p.stderr, (json.loads(res.read_text()) if res.exists() else None)


def _impl(data, name):
    return next(i for i in data["implementations"] if i["name"] == name)


def test_an_input_mutation_is_flagged_and_does_not_hide_the_next_bug(tmp_path):
    rc, out, err, data = conform(tmp_path, H + "mutates_qdq", BUGGY, H + "correct")
    assert rc == 1, (out, err)
    assert _impl(data, "ties-away")["failed"], "the buggy implementation passed on inputs mutated before it"
    m = _impl(data, "mutates-qdq")
    assert m["failed"] and "changed its input" in json.dumps(data["cells"]), out
    assert not _impl(data, "correct")["failed"]


def test_sys_exit_0_is_a_fail_not_a_green_run(tmp_path):
    rc, out, err, data = conform(tmp_path, H + "exits_0", BUGGY, H + "correct")
    assert rc == 1, (out, err)
    assert data is not None, "no report written"
    e = _impl(data, "exits-0")
    assert e["failed"] and "exit" in e.get("error", ""), e
    assert _impl(data, "ties-away")["failed"] and not _impl(data, "correct")["failed"]


HOSTILE = {  # implementation -> what its FAIL must say
    "exits_7": "called sys.exit(7)",
    "os_exit": "exited with status 3",
    "segfault": "killed by signal SIGSEGV",
    "hangs": "timed out: cell mxfp4 floor rne float32 ran longer than 4 s",
    "chatty": "printed more than",
    "factory_raises": "RuntimeError: this factory is broken",
}
NAMES = {"exits_7": "exits-7", "os_exit": "os-exit", "segfault": "segfault", "hangs": "hangs", "chatty": "chatty",
         "factory_raises": "suites.conformance.hostile:factory_raises"}


def test_hostile_implementations_each_fail_alone(tmp_path):
    impls = [H + "correct", BUGGY] + [H + h for h in HOSTILE] + [H + "returns_nothing", H + "mutates_qdq"]
    rc, out, err, data = conform(tmp_path, *impls, extra=["--cell-timeout", "4", "--impl-timeout", "60"])
    assert rc == 1, (out, err)
    assert not _impl(data, "correct")["failed"], out
    ties = _impl(data, "ties-away")
    assert ties["failed"] and "error" not in ties and ties["cells"] == 3, ties
    for h, why in HOSTILE.items():
        i = _impl(data, NAMES[h])
        assert i["failed"] and why in i.get("error", ""), (h, i)
        assert f"FAIL  {NAMES[h]}" in out and why in out
    nothing = [c for c in data["cells"] if c["implementation"] == "returns-nothing"]
    assert len(nothing) == 3 and all(c["stages"]["qdq"]["status"] == "error" for c in nothing)
    assert len(out) < 100_000, "the chatty implementation's output reached the run's"
    summary = (tmp_path / "reports" / "latest" / "summary.md").read_text()
    assert "## Failed implementations" in summary and "killed by signal SIGSEGV" in summary


def test_in_process_keeps_the_mutation_check(tmp_path):
    rc, out, err, data = conform(tmp_path, H + "mutates_qdq", BUGGY, extra=["--in-process"])
    assert rc == 1 and _impl(data, "ties-away")["failed"]
    assert any(s.get("input_mutated") for c in data["cells"] for s in c["stages"].values())


def test_a_child_that_exits_before_its_cells_are_read_is_reaped_once():
    """The parent may still be reading cells (a slow progress callback: reports
    written per cell) when the child has sent everything and exited: it is
    reaped once and every cell still counts."""
    import time

    import torch

    from harness.conformance.runner import run_conformance

    seen = []

    def slow(impl, cell, res):
        seen.append(cell)
        time.sleep(0.05)

    data = run_conformance(["reference"], formats=["mxfp8_e4m3"], device=torch.device("cpu"), seed=0,
                           random_blocks=4, progress=slow, isolate=True)
    ref = _impl(data, "reference")
    assert not ref.get("error") and not ref["failed"], ref
    assert len(seen) == ref["cells"] > 1


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_conform_interrupted_writes_the_report_of_what_finished(tmp_path, sig, code):
    ready = tmp_path / "hang.ready"
    p = start(["conform", "--formats", "mxfp4", "--random-blocks", "16", "--reports", str(tmp_path / "reports"),
               "--impl", H + "correct", "--impl", H + "hangs", "--impl", BUGGY], env={"HANG_READY": str(ready)})
    wait_until(ready.exists, p, "the hanging implementation started")
    rc, out, err, alive = interrupt(p, sig)
    assert rc == code, (rc, out, err)
    assert alive == [], "an implementation's process outlived the run"
    assert "Traceback" not in err and f"INTERRUPTED ({sig.name})" in out, (out, err)
    data = json.loads((tmp_path / "reports" / "latest" / "results.json").read_text())
    assert data["interrupted"] == sig.name and data["meta"]["finished"] is False
    assert not _impl(data, "correct")["failed"] and _impl(data, "correct")["cells"] == 3
    assert f"interrupted ({sig.name})" in _impl(data, "hangs")["error"]
    assert "ties-away" not in [i["name"] for i in data["implementations"]]
    assert "INTERRUPTED" in (tmp_path / "reports" / "latest" / "summary.md").read_text()


def test_spawned_children_as_a_cuda_run_uses_them():
    """A CUDA run spawns each implementation's child (CUDA does not survive a
    fork): the same verdicts through a fresh interpreter, run here on the CPU.
    One that does not pickle (closures) is rebuilt in the child from the name
    it was found by, so it is isolated all the same: its os._exit and its
    SIGSEGV end its child, not the run. Only one registered in this process
    (no name another interpreter knows) runs in-process, and says so."""
    from harness.conformance import get_implementation, register_implementation, run_conformance
    from harness.conformance import registry as reg
    from harness.conformance.isolation import Limits, start_method

    assert start_method("cuda", get_implementation(H + "exits_0")) == ("spawn", "")
    assert start_method("cuda", get_implementation(H + "correct")) == ("spawn", "")
    names = [H + "correct", H + "picklable_exit", H + "picklable_segv", H + "os_exit", H + "segfault"]
    data = run_conformance(names, formats=["mxfp4"], random_blocks=8, limits=Limits(start="spawn"))
    assert not _impl(data, "correct")["failed"] and _impl(data, "correct")["cells"] == 3
    assert "exited with status 5" in _impl(data, "picklable-exit")["error"]
    assert "killed by signal SIGSEGV" in _impl(data, "picklable-segv")["error"]
    assert "exited with status 3" in _impl(data, "os-exit")["error"]
    assert "killed by signal SIGSEGV" in _impl(data, "segfault")["error"]
    assert not any(i.get("isolation") for i in data["implementations"])
    import dataclasses

    from suites.conformance import hostile
    register_implementation("in-process-only", dataclasses.replace(hostile.os_exit, name="in-process-only"))
    try:
        method, why = start_method("cuda", get_implementation("in-process-only"))
    finally:
        reg._REGISTERED.pop("in-process-only", None)
    assert method is None and "neither pickles" in why and "registered in this process only" in why
