"""`checkpoint make` and `checkpoint synth` interrupted (SIGINT, SIGTERM to the
command alone): the maker's process group is stopped (SIGTERM, grace, SIGKILL),
no temporary folder is left, the cached entry is what it was (verified, its
log untouched), one line, exit 130 / 143, no traceback."""
import os
import signal
import subprocess
import sys

import pytest

from harness.checkpoints import cache, make
from harness.checkpoints.make import make_checkpoint
from harness.util import interrupt as itr

from suites.interrupting import interrupt, marked, one_line, start, wait_until

SIGS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]


def _cmdline(pid) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:  # exited meanwhile
        return b""


@pytest.mark.parametrize("sig,code", SIGS)
def test_make_force_interrupted(tmp_path, monkeypatch, sig, code):
    monkeypatch.setenv("MOE_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    before = make_checkpoint("gpt-oss", "mxfp4")
    log_before = (before / cache.LOG).read_bytes()
    link = make.cached_path("gpt-oss", "mxfp4")
    p = start(["checkpoint", "make", "--producer", "gpt-oss", "--scheme", "mxfp4", "--force"],
              env={"MOE_HARNESS_CACHE_DIR": str(tmp_path / "cache")})

    def worker_running():
        return any(b"make_worker" in _cmdline(pid) for pid in marked(p.mark)) \
            and list(link.parent.glob(f".{link.name}-tmp-*"))
    wait_until(worker_running, p, "the maker started")
    rc, out, err, alive = interrupt(p, sig)
    assert rc == code, (rc, out, err)
    assert sig.name in one_line(err, "moe-harness checkpoint make: interrupted")
    assert alive == [], "the maker outlived the command"
    assert not list(link.parent.glob(f".{link.name}*")), "a temporary folder or file was left"
    assert link.resolve() == before.resolve()
    cache._verified.clear()
    cache.verify(before)
    assert (before / cache.LOG).read_bytes() == log_before


@pytest.mark.parametrize("sig,code", SIGS)
def test_synth_interrupted(tmp_path, sig, code):
    out_dir = tmp_path / "synth"
    p = start(["checkpoint", "synth", "--shape", "mixtral-8x7b", "--scheme", "nvfp4", "--out", str(out_dir),
               "--device", "cpu", "--shard-gib", "0.01"])
    wait_until(lambda: [f for d in tmp_path.glob(".synth.tmp-*") for f in d.glob("shard-*.tmp")], p,
               "the first shard was written")
    rc, out, err, alive = interrupt(p, sig)
    assert rc == code, (rc, out, err)
    assert sig.name in one_line(err, "moe-harness checkpoint synth: interrupted")
    assert alive == [] and sorted(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_maker_starts_still_stops_it(monkeypatch, sig):
    """The window the timed tests above only hit by luck: the child is already
    exec'd but Popen has not returned (it still reads the child's error pipe)
    when the signal comes. Made certain here: Popen returns only after the
    signal was raised. The child must be stopped all the same."""
    real = subprocess.Popen
    started = []

    def popen_then_signal(*a, **kw):
        proc = real(*a, **kw)
        started.append(proc)
        signal.raise_signal(sig)  # under catch_signals: Interrupted here, before the caller has `proc`
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen_then_signal)
    try:
        with itr.catch_signals(), pytest.raises(itr.Interrupted) as got:
            itr.run_group([sys.executable, "-c", "import time; time.sleep(120)"], grace_s=5.0)
        assert got.value.signum == sig
        (proc,) = started
        assert proc.returncode is not None, "the child outlived the interrupted start"
        assert itr.group_alive(proc.pid) == []
        with pytest.raises(ProcessLookupError):
            os.kill(proc.pid, 0)  # reaped, not a zombie
    finally:
        for proc in started:  # a leaked child must not outlive the test either
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class _SignalAfterFirstWrite:
    """A stream whose second write is cut off by a signal, as the handler
    raises between Python calls: only whole writes before it reach the file."""

    def __init__(self):
        self.text, self.writes = "", 0

    def write(self, s):
        self.writes += 1
        if self.writes > 1:
            raise itr.Interrupted(signal.SIGINT)
        self.text += s

    def flush(self):
        pass


def test_a_progress_line_keeps_its_newline_when_a_signal_comes():
    """synth's shard lines (and every stderr progress line of an interruptible
    command) are one write with their newline: the interrupt message that
    follows starts a line of its own (print writes the newline apart, and a
    signal between its two writes runs the two lines together)."""
    s = _SignalAfterFirstWrite()
    itr.say_line("shard 1: 0.24 GiB, 1 tensors", s)
    assert s.text == "shard 1: 0.24 GiB, 1 tensors\n"
    p = _SignalAfterFirstWrite()
    with pytest.raises(itr.Interrupted):
        print("shard 1: 0.24 GiB, 1 tensors", file=p, flush=True)
    assert p.text == "shard 1: 0.24 GiB, 1 tensors"  # what print left: no newline
