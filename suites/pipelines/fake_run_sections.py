"""Test-only check sections for `moe-harness run` (suites/pipelines/test_run_interrupt.py).

Selected with HARNESS_RUN_TEST_SECTIONS=suites.pipelines.fake_run_sections; each
replaces the real section of the same name, so the real main loop, report
writing, signal handling and output routing run on checks that take
milliseconds. HARNESS_FAKE_DIR is where they leave what the test inspects.
"""

import json
import logging
import os
import signal
import subprocess
import sysconfig
import warnings
from pathlib import Path


def _out() -> Path:
    return Path(os.environ["HARNESS_FAKE_DIR"])


def _publish(name: str, text: str):
    tmp = _out() / (name + ".tmp")
    tmp.write_text(text)
    tmp.rename(_out() / name)  # the test never reads a half-written file


def formats(ctx, emit):
    """Two quick checks, the second failing; after the first, what is on disk already."""
    emit({"name": "fake/ok", "passed": True, "details": {"x": 1}})
    folder = ctx["report_dir"].path
    _publish("after-first.json", json.dumps({
        "results": [r["name"] for r in json.loads((folder / "results.json").read_text())["results"]],
        "summary": (folder / "summary.md").read_text(),
        "junit": (folder / "junit.xml").read_text(),
    }))
    emit({"name": "fake/bad", "passed": False, "message": "wrong on purpose", "details": {}})


def kernels(ctx, emit):
    """Hangs in a child process until interrupted; the child is ended as subprocess.run would."""
    child = subprocess.Popen(["sleep", "600"])
    try:
        _publish("child.pid", str(child.pid))
        child.wait()
    finally:
        child.kill()
        child.wait()
    emit({"name": "fake/never", "passed": True})


def moe(ctx, emit):
    """One check, then a signal arrives between checks."""
    emit({"name": "fake/before-signal", "passed": True})
    signal.raise_signal(getattr(signal, os.environ["HARNESS_FAKE_SIGNAL"]))
    emit({"name": "fake/after-signal", "passed": True})


def lmeval(ctx, emit):
    """Library noise of every kind, one warning about the user's input, a progress line."""
    library_file = os.path.join(sysconfig.get_paths()["purelib"], "fakelib", "core.py")
    warnings.warn_explicit("fakelib deprecation noise", FutureWarning, library_file, 1)
    logging.getLogger("lm_eval").warning("lm_eval aggregation notice")
    os.write(2, b"Failed to load fakelib/_C_mxfp8.so\n")
    warnings.warn("your config sets something odd", UserWarning)
    ctx["progress"]("      fake progress: task 3/3 items")
    emit({"name": "fake/lmeval", "passed": True, "time": 0.25})


SECTIONS = {"formats": formats, "kernels": kernels, "moe": moe, "lmeval": lmeval}
