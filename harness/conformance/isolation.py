"""Each implementation's cells run in a child process of their own, so that
one implementation cannot end, hang or corrupt the run of another.

On the CPU the child is forked from the run (it inherits the implementation
object, the inputs and the registry: an Implementation built in-process, a
closure in a pytest test included); a CUDA run spawns a fresh interpreter
instead (CUDA does not survive a fork of a process that initialized the
driver), which takes the implementation by pickle or, when it does not
pickle (closures), rebuilds it from the name it was found by (`start_method`,
`ByName`). The
child leads its own process group, has SIGINT/SIGTERM at
their defaults, and writes its stdout/stderr to a file. It sends one message
per cell over a pipe. The parent gives each cell `cell_timeout_s` and the
whole implementation `impl_timeout_s`, and stops the child's group (SIGTERM,
a grace period, SIGKILL) when a limit passes, when its output passes
`output_limit` bytes, or when the run itself is interrupted. An exit, a
signal, a timeout or too much output is that implementation's FAIL with the
reason and the cell it happened in; the cells it finished are kept.

`run_in_process` runs the same cells in this process (no isolation; for the
pytest plugin's `isolate=False` and debugging), with the same per-call input
copies and mutation checks (compare.guarded_call).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

from harness.conformance.compare import cell_failed, run_cell
from harness.util import interrupt

CELL_TIMEOUT_S = 600.0
IMPL_TIMEOUT_S = 3600.0
OUTPUT_LIMIT = 1 << 20        # bytes an implementation may print over its whole run
GRACE_S = 5.0                 # SIGTERM -> SIGKILL for a stopped implementation
TAIL = 2000                   # characters of its output kept in the report


@dataclass
class Limits:
    cell_timeout_s: float = CELL_TIMEOUT_S
    impl_timeout_s: float = IMPL_TIMEOUT_S
    output_limit: int = OUTPUT_LIMIT
    grace_s: float = GRACE_S
    start: str | None = None      # "fork" or "spawn"; None: fork on the CPU, spawn for CUDA

    def __post_init__(self):
        for k in ("cell_timeout_s", "impl_timeout_s", "grace_s"):
            v = getattr(self, k)
            if not (isinstance(v, (int, float)) and 0 < v < float("inf")):
                raise ValueError(f"{k} must be a positive number of seconds, got {v!r}")
        if not (isinstance(self.output_limit, int) and self.output_limit > 0):
            raise ValueError(f"output_limit must be a positive number of bytes, got {self.output_limit!r}")
        if self.start not in (None, "fork", "spawn"):
            raise ValueError(f"start must be 'fork' or 'spawn', got {self.start!r}")


@dataclass
class Outcome:
    cells: list = field(default_factory=list)
    error: str | None = None          # why the implementation failed as a whole (exit, signal, timeout, ...)
    output_tail: str = ""
    interrupted: BaseException | None = None
    isolation: str = ""               # set when the implementation did not run in a child process (why)


@dataclass(frozen=True)
class ByName:
    """What a spawned child gets instead of an implementation that does not
    pickle: the name the registry found it by, resolved again in the child."""

    name: str

    def resolve(self):
        from harness.conformance.registry import get_implementation  # the registry imports the adapters: only here

        return get_implementation(self.name)


def _one(impl, job, device, registry, seed) -> dict:
    cell, fi = job
    res = run_cell(impl, cell, fi.x, fi.labels, device, registry, seed=seed)
    res["failed"] = cell_failed(res)
    return res


def run_in_process(impl, jobs, device, registry, seed, progress=None) -> Outcome:
    out = Outcome()
    try:
        for job in jobs:
            res = _one(impl, job, device, registry, seed)
            out.cells.append(res)
            if progress:
                progress(impl, job[0], res)
    except KeyboardInterrupt as e:
        out.interrupted = e
        out.error = f"interrupted ({interrupt.signal_name(e)})"
    return out


def _child(impl, jobs, device, registry, seed, conn, out_path) -> None:
    """The child: never returns (os._exit), whatever the implementation does."""
    code = 70
    try:
        os.setsid()
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)
        out_fd = os.open(out_path, os.O_WRONLY | os.O_APPEND)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        # the parent's OpenMP pool does not survive a fork (libgomp hangs in the
        # child's first parallel region); one thread runs torch without it
        torch.set_num_threads(1)
        if isinstance(impl, ByName):
            impl = impl.resolve()
        for job in jobs:
            conn.send(("start", job[0].label()))
            conn.send(("cell", _one(impl, job, device, registry, seed)))
        conn.send(("done", None))
        code = 0
    except SystemExit as e:
        try:
            conn.send(("exit", f"called sys.exit({e.code!r})"))
        except Exception:
            pass
        code = e.code if isinstance(e.code, int) else 1
    except BaseException as e:
        try:
            conn.send(("exit", f"raised {type(e).__name__}: {e}"))
        except Exception:
            pass
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)


def _reap(proc, wait_s: float) -> int:
    """The child's exit code (negative: the signal) once it exits by itself within `wait_s`, else after stopping it."""
    proc.join(wait_s)
    return proc.exitcode if proc.exitcode is not None else _stop(proc, 0.1)


def _stop(proc, grace_s: float) -> int:
    """SIGTERM to the child's group, `grace_s`, SIGKILL; its exit code."""
    interrupt.terminate_group(proc.pid, grace_s)
    try:
        os.kill(proc.pid, signal.SIGKILL)  # not yet its own group leader when it was stopped
    except ProcessLookupError:
        pass
    proc.join()
    return proc.exitcode


def _status(code: int) -> str:
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code}"


def start_method(device, impl, start=None) -> tuple:
    """("fork" | "spawn" | None, why). CUDA does not survive a fork once the
    driver is initialized (torch.cuda.is_available() does that), so a CUDA run
    spawns a fresh interpreter, which takes the implementation by pickle (a
    module-level object) or rebuilds it from the name the registry found it
    by (`child_view`); one that does neither (registered in this process
    only) runs in this process, and the report says so."""
    if start == "fork" or (start is None and torch.device(device).type != "cuda"):
        return "fork", ""
    try:
        pickle.dumps(impl)
    except Exception as e:
        if getattr(impl, "found_by", None):
            return "spawn", ""
        return None, (f"in this process: a CUDA run needs a fresh interpreter and the implementation neither "
                      f"pickles ({type(e).__name__}: {' '.join(str(e).split())[:120]}) nor has a name another "
                      "interpreter can find it by (registered in this process only)")
    return "spawn", ""


def child_view(impl, method: str):
    """What the child process is handed: the implementation itself (fork, or
    it pickles), else its name to be resolved there."""
    if method == "spawn":
        try:
            pickle.dumps(impl)
        except Exception:
            return ByName(impl.found_by)
    return impl


def _tail(path: str) -> str:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - TAIL))
        return f.read().decode("utf-8", "replace")


def run_isolated(impl, jobs, device, registry, seed, limits: Limits | None = None, progress=None) -> Outcome:
    limits = limits or Limits()
    method, why = start_method(device, impl, limits.start)
    if method is None:
        out = run_in_process(impl, jobs, device, registry, seed, progress)
        out.isolation = why
        return out
    ctx = multiprocessing.get_context(method)
    out = Outcome()
    recv, send = ctx.Pipe(duplex=False)
    with tempfile.NamedTemporaryFile(prefix="moe-harness-conform-", suffix=".out") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        proc = ctx.Process(target=_child, args=(child_view(impl, method), jobs, device, registry, seed, send, log.name),
                           daemon=False)
        with interrupt.deferred():  # a spawn writes the child's setup data: not cut in half
            proc.start()
        send.close()
        code, current, t0, finished = None, None, time.monotonic(), False
        cell_t0 = t0
        try:
            while True:
                now = time.monotonic()
                if now - t0 > limits.impl_timeout_s:
                    out.error = f"timed out: the implementation ran longer than {limits.impl_timeout_s:g} s" + \
                                (f" (in cell {current})" if current else "")
                    break
                if current is not None and now - cell_t0 > limits.cell_timeout_s:
                    out.error = f"timed out: cell {current} ran longer than {limits.cell_timeout_s:g} s"
                    break
                if os.fstat(log.fileno()).st_size > limits.output_limit:
                    out.error = f"printed more than {limits.output_limit} bytes" + \
                                (f" (in cell {current})" if current else "")
                    break
                if recv.poll(0.05):
                    try:
                        kind, value = recv.recv()
                    except (EOFError, OSError):
                        kind, value = "eof", None
                    if kind == "start":
                        current, cell_t0 = value, time.monotonic()
                    elif kind == "cell":
                        out.cells.append(value)
                        if progress:
                            progress(impl, _CellLabel(current), value)
                        current = None
                    elif kind == "done":
                        finished = True
                        code = _reap(proc, limits.grace_s)
                        break
                    elif kind == "exit":
                        out.error = value + (f" (in cell {current})" if current else "")
                        break
                    else:  # the pipe closed: the process is gone
                        break
                # exited: stop once every cell it sent before exiting is read
                if proc.exitcode is not None and not recv.poll(0):
                    code = proc.exitcode
                    break
        except KeyboardInterrupt as e:
            out.interrupted = e
            out.error = f"interrupted ({interrupt.signal_name(e)})" + (f" in cell {current}" if current else "")
        finally:
            if code is None:
                code = _stop(proc, limits.grace_s)
            recv.close()
        if finished:
            pass  # every cell reported; how the process went after that does not matter
        elif out.error is None and code != 0:
            out.error = _status(code) + (f" (in cell {current})" if current else "")
        elif out.error is None and len(out.cells) != len(jobs):
            out.error = f"{_status(code)} after {len(out.cells)} of {len(jobs)} cells"
        out.output_tail = _tail(log.name)
    return out


class _CellLabel:
    """What `progress` needs of a cell in the parent (the child sends its label)."""

    def __init__(self, label):
        self._label = label or "?"

    def label(self) -> str:
        return self._label
