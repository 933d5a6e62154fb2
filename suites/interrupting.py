"""Interrupting a command as `timeout`, an agent or a person does: start it in
a fresh interpreter (its environment marked, so that every process it starts
can be found in /proc, whatever session or group it moved to), wait until a
condition says it is mid-work, send one signal to the command's process
alone (the harder case: its children hear nothing from outside), and
collect what it left: exit status, stderr, live marked processes."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "MOE_HARNESS_TEST_MARK"


def start(args, env=None, cwd=ROOT) -> subprocess.Popen:
    mark = uuid.uuid4().hex
    e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    e[MARK] = mark
    p = subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=e, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.mark = mark
    return p


def marked(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment holds the mark."""
    out = []
    needle = f"{MARK}={mark}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    out.append(int(d.name))
        except OSError:
            continue
    return out


def wait_until(cond, proc, what: str, timeout_s: float = 180.0):
    """A condition, not a measurement: generous for a loaded machine."""
    end = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"the command ended (rc {proc.returncode}) before {what}: {proc.communicate()}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.02)


def interrupt(proc, sig) -> tuple[int, str, str, list]:
    """(exit status, stdout, stderr, marked processes still alive) after `sig` to the command alone."""
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err, marked(proc.mark)


def one_line(err: str, prefix: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
