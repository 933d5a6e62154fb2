"""SIGTERM handled like Ctrl-C, so `timeout`, CI agents and people stopping a
run all get the same thing: the report of what finished and no job left behind.

`catch_signals()` makes SIGINT and SIGTERM raise `Interrupted` (a
KeyboardInterrupt, so every `except KeyboardInterrupt` and every
`finally` sees it) in the main thread. A second signal while the first is
being handled is ignored: cleanup (killing jobs, writing reports) is short
and must not be cut in half.

`group_alive` / `kill_group` / `terminate_group` are the process-group
half: a job runs in its own group, and stopping it means SIGTERM to the
group, a grace period, then SIGKILL until no live member is left.
`run_group` starts a child as the leader of its own group (signals held
until it is in hand) and waits for it; when the wait is interrupted (or the
child outlives its time limit) it stops the whole group that way before the
exception goes on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def say_line(text: str, stream=None) -> None:
    """`text` and its newline in one write, then a flush. print() writes them
    apart, and the signal handler (which raises between Python calls) can
    run in between: the interrupt message would run on from the unfinished
    progress line."""
    stream = sys.stderr if stream is None else stream
    stream.write(text + "\n")
    stream.flush()


class Interrupted(KeyboardInterrupt):
    """Raised by the handler; `exit_code` is the shell's 128 + signal number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(exc: BaseException) -> int:
    """130 for a plain KeyboardInterrupt (SIGINT by Python's own handler)."""
    return exc.exit_code if isinstance(exc, Interrupted) else 128 + signal.SIGINT


def signal_name(exc: BaseException) -> str:
    return exc.name if isinstance(exc, Interrupted) else "SIGINT"


class _Guard:
    def __init__(self):
        self.fired: list[int] = []
        self.shielded = False

    def shield(self):
        """From now on signals are only noted: the run's last writes are not cut in half."""
        self.shielded = True


@contextmanager
def catch_signals():
    """Inside: SIGINT/SIGTERM raise Interrupted once; later ones (or any after
    `guard.shield()`) are noted in `guard.fired` and otherwise ignored."""
    guard = _Guard()

    def handler(signum, frame):
        first = not guard.fired
        guard.fired.append(signum)
        if first and not guard.shielded:
            raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield guard
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def deferred():
    """Inside: SIGINT/SIGTERM are only noted; on leaving, the first one noted is
    raised again under the handlers in force before. For steps that must not
    be cut in half (starting a worker process while its setup data is written
    to it). Outside the main thread it does nothing (signals go there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: noted.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if noted:
            signal.raise_signal(noted[0])


def _pgrp_and_state(stat: str) -> tuple[int, str]:
    # /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[2]), fields[0]


def group_alive(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in process group `pgid` (Linux /proc)."""
    alive = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            pgrp, state = _pgrp_and_state((d / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue  # exited while we looked
        if pgrp == pgid and state not in ("Z", "X"):
            alive.append(int(d.name))
    return alive


GRACE_S = 10.0  # SIGTERM -> SIGKILL, as a Buildkite agent's cancel grace period


def terminate_group(pgid: int, grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM to group `pgid`, up to `grace_s` for its members to exit, then
    SIGKILL (kill_group); returns what is still alive after that."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return group_alive(pgid)
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        if not group_alive(pgid):
            return []
        time.sleep(0.02)
    return kill_group(pgid)


def run_group(args, timeout_s: float | None = None, grace_s: float = GRACE_S, **popen_kw) -> int:
    """Run `args` as the leader of a new process group and wait for it; on
    any exception (Interrupted, or the timeout's subprocess.TimeoutExpired)
    the group is terminated first, then the exception goes on.

    The start is where a signal would leak the child: once the child has
    been exec'd, Popen still reads its error pipe before it returns, and an
    Interrupted raised there leaves no Popen object to stop. So signals are
    held while it starts, and one that came meanwhile is raised with the
    child already in hand."""
    proc = None
    try:
        with deferred():
            proc = subprocess.Popen(args, start_new_session=True, **popen_kw)
        return proc.wait(timeout=timeout_s)
    except BaseException:
        if proc is not None:
            terminate_group(proc.pid, grace_s)
            proc.wait()
        raise


def kill_group(pgid: int, deadline_s: float = 60.0) -> list[int]:
    """SIGKILL every process of group `pgid` and wait until none is alive.

    SIGKILL is delivered asynchronously: a loaded machine may take a while to
    schedule the dying processes. The wait is on the condition (no live member),
    with a generous deadline; what is still alive then is returned, never hidden.
    """
    end = time.monotonic() + deadline_s
    while True:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        alive = group_alive(pgid)
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.02)
