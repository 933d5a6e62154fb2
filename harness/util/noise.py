"""Keeps third-party library output off the screen, in a log file instead.

torch, torchao, transformers and lm-eval print at import and while they run
(failed optional extensions, deprecation warnings, per-task notices,
progress bars). Inside `to_log(path)`:

- file descriptor 2 goes to the log: C-level prints and anything that
  writes to the process's stderr directly;
- `sys.stdout` / `sys.stderr` become routers: a write whose caller is this
  project's code (or the user's script) reaches the screen, a write from any
  other module (logging, tqdm, warnings, a library's print) goes to the log;
- Python warnings raised in third-party modules go to the log; warnings
  attributed to this project's or the user's code stay on screen, since
  those are about the user's own input.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import warnings
from contextlib import contextmanager
from pathlib import Path

OWN_PACKAGES = ("harness", "suites", "__main__")


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(sorted(os.path.realpath(d) + os.sep for d in dirs if d))


def is_third_party_file(filename: str, library_dirs=None) -> bool:
    """Whether `filename` belongs to an installed library (or the standard library)."""
    library_dirs = _library_dirs() if library_dirs is None else library_dirs
    if not filename or filename.startswith("<"):
        return True  # frozen importlib, <string>: not the user's file
    real = os.path.realpath(filename)
    return real.startswith(library_dirs) and not _is_own_file(real)


def _is_own_file(real: str) -> bool:
    # An editable install of this project may sit under site-packages.
    own = os.path.realpath(Path(__file__).resolve().parent) + os.sep
    return real.startswith(own)


def _own_module(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in OWN_PACKAGES)


class _Router:
    """A text stream that sends each write to the screen or the log by its caller's module."""

    def __init__(self, screen, log):
        self._screen = screen
        self._log = log

    def write(self, text):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        target = self._screen if _own_module(caller) else self._log
        n = target.write(text)
        if target is self._screen:
            target.flush()
        return n

    def flush(self):
        self._screen.flush()
        self._log.flush()

    def isatty(self):
        return False  # progress bars that ask draw plain lines into the log

    def fileno(self):
        return self._log.fileno()

    def __getattr__(self, name):
        return getattr(self._screen, name)


def _writes_to_fd2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


@contextmanager
def to_log(path, enabled: bool = True):
    """Route third-party output to `path` (appended) while inside; yields the path."""
    if not enabled:
        yield None
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    log = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
    saved_fd2 = os.dup(2)
    # The screen is what sys.stderr was: a copy of fd 2 when it wrote there (fd 2
    # itself goes to the log below), else the stream itself (pytest's capture).
    err_on_fd2 = _writes_to_fd2(sys.stderr)
    screen_err = (os.fdopen(os.dup(saved_fd2), "w", buffering=1, encoding="utf-8", errors="replace")
                  if err_on_fd2 else sys.stderr)
    os.dup2(log.fileno(), 2)
    old_out, old_err, old_show = sys.stdout, sys.stderr, warnings.showwarning
    library_dirs = _library_dirs()

    def showwarning(message, category, filename, lineno, file=None, line=None):
        text = warnings.formatwarning(message, category, filename, lineno, line)
        target = log if is_third_party_file(filename, library_dirs) else screen_err
        target.write(text)
        target.flush()

    sys.stdout = _Router(old_out, log)
    sys.stderr = _Router(screen_err, log)
    warnings.showwarning = showwarning
    try:
        yield path
    finally:
        sys.stdout, sys.stderr, warnings.showwarning = old_out, old_err, old_show
        try:
            sys.stdout.flush()
        finally:
            os.dup2(saved_fd2, 2)
            os.close(saved_fd2)
            if err_on_fd2:
                screen_err.close()
            log.close()
            if path.stat().st_size == 0:
                path.unlink()  # nothing was said: no empty file to wonder about
