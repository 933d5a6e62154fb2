"""The one command-line convention every `moe-harness` command follows
(docs/internal-api.md, "Commands"; suites/test_cli_convention.py walks every
subcommand and holds it to this):

- `--reports DIR` (default reports/): the command writes
  DIR/<UTC timestamp>-<kind>/ with results.json, summary.md and junit.xml
  (atomically, after every finished check) and points DIR/latest at it;
  a command that only prints (a dry run, a plan, a list) writes nothing;
- `-q/--quiet` prints only failures and the final line, `-v/--verbose` also
  shows third-party library output, which otherwise goes to
  <report>/third_party.log;
- exit codes: 0 pass, 1 a finding (a failed check), 2 bad input (one line
  naming the file, field or flag), 130 / 143 stopped by SIGINT / SIGTERM
  (the finished checks stay in the report, marked "interrupted": true);
  a command with another code lists it in its own --help.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from harness.util import interrupt, noise
from harness.util import report as hr

EXIT_CODES = (
    (0, "pass"),
    (1, "a finding: a check or gate failed"),
    (2, "bad input: one line names the file, field or flag"),
    (130, "stopped by SIGINT (Ctrl-C); the report keeps what finished"),
    (143, "stopped by SIGTERM; the report keeps what finished"),
)


def exit_codes_text(extra: tuple = ()) -> str:
    rows = sorted(EXIT_CODES + tuple(extra))
    return "exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in rows)


def add_common(parser: argparse.ArgumentParser, *, extra_codes: tuple = ()) -> None:
    """--reports, -q/--quiet, -v/--verbose (each unless the command defines
    it) and the exit codes in --help. Idempotent: cli.py applies it to every
    leaf parser after the command's own add_arguments."""
    have = parser._option_string_actions
    if "--reports" not in have:
        parser.add_argument("--reports", default="reports", metavar="DIR",
                            help="reports root: DIR/<timestamp>-<kind>/ and DIR/latest (default: reports)")
    if "-q" not in have and "-v" not in have:
        loud = parser.add_mutually_exclusive_group()
        loud.add_argument("-q", "--quiet", action="store_true", help="print only failures and the final line")
        loud.add_argument("-v", "--verbose", action="store_true",
                          help="also show third-party library output (otherwise in <report>/third_party.log)")
    elif "-q" not in have:
        parser.add_argument("-q", "--quiet", action="store_true", help="print only failures and the final line")
    elif "-v" not in have:
        parser.add_argument("-v", "--verbose", action="store_true",
                            help="also show third-party library output (otherwise in <report>/third_party.log)")
    codes = tuple(getattr(parser, "_harness_extra_codes", ())) + tuple(extra_codes)
    parser._harness_extra_codes = codes
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    base = (parser.epilog or "").split("exit codes:")[0].rstrip()
    parser.epilog = ((base + "\n\n") if base else "") + exit_codes_text(codes)
    parser.set_defaults(_exit_codes=tuple(c for c, _ in sorted(EXIT_CODES + codes)))


def leaf_parsers(parser: argparse.ArgumentParser, path=()):
    """(command words, parser) of every leaf under `parser` (sub-subcommands included)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for action in subs:
        for name, sub in action.choices.items():
            yield from leaf_parsers(sub, path + (name,))


def run_with_report(module, args, words) -> int:
    """A command's main inside the convention: a report folder with
    results.json, summary.md, junit.xml and third_party.log, signals caught,
    `latest` moved. A command that manages its own report (OWN_REPORT), or
    whose invocation only prints (`prints_only(args)`: a dry run, a list, a
    plan), runs as it is. A command refusing its input (exit 2, nothing
    recorded) leaves no report folder behind. A command with no recorded
    check gets one, named after it, passed iff it exited 0."""
    words = [words] if isinstance(words, str) else list(words)
    own = getattr(module, "OWN_REPORT", False)
    if (own(args) if callable(own) else own) or getattr(module, "prints_only", lambda a: False)(args):
        return int(module.main(args) or 0)
    title = "moe-harness " + " ".join(words)
    rep = CommandReport(args, "-".join(words), title)
    try:
        rep.__enter__()
    except hr.ReportRootError as e:
        return refuse(" ".join(words), e)
    args.report = rep
    try:
        rc = int(module.main(args) or 0)
    except BaseException as e:  # KeyboardInterrupt (and Interrupted) included
        if not rep.__exit__(type(e), e, e.__traceback__):
            raise
        return rep.exit_code
    if rc == 2 and not rep.rd._results:
        rep.discard()
        return rc
    if not rep.rd._results:
        rep.record({"name": title, "passed": rc == 0, "message": "" if rc == 0 else f"exit status {rc}"})
    elif rc != 0:
        rep.fail()
    rep.__exit__(None, None, None)
    return rc


def report_dir(args, kind: str) -> hr.ReportDir:
    """The folder of this invocation's report: the one `moe-harness` made
    (args.report), else (a module run directly) a new one under --reports."""
    rep = getattr(args, "report", None)
    if rep is not None:
        return rep.rd
    return hr.ReportDir.create(kind, root=getattr(args, "reports", "reports"))


def refuse(command: str, message) -> int:
    """Bad input: one line on stderr, exit 2."""
    print(f"moe-harness {command}: {message}", file=sys.stderr, flush=True)
    return 2


class CommandReport:
    """One command's report folder, its third-party log and its signals.

        with CommandReport(args, "conform", "moe-harness conform") as rep:
            rep.record({"name": ..., "passed": ..., "message": ..., "details": ...})
        return rep.exit_code

    `record` rewrites results.json, summary.md and junit.xml at once; leaving
    the block writes them with "finished" (or "interrupted" and the signal),
    moves `latest`, and sets exit_code: 130 / 143 after a signal, else 1 when a
    recorded check failed, else 0 (a command may raise it with `fail()`)."""

    def __init__(self, args, kind: str, title: str, meta: dict | None = None, summary=None):
        self.args, self.kind, self.title = args, kind, title
        self.summary = summary   # (results, meta) -> markdown: a command's own summary.md
        self.own_files = None    # rd -> None: a command's own results.json / summary.md, written after ours
        self.quiet = bool(getattr(args, "quiet", False))
        self.verbose = bool(getattr(args, "verbose", False))
        self.meta = {"command": "moe-harness " + " ".join(sys.argv[1:]), "finished": False, **(meta or {})}
        self.rd: hr.ReportDir | None = None
        self.exit_code = 0
        self._failed = False
        self._stack = ExitStack()
        self.stopped: BaseException | None = None

    @property
    def path(self) -> Path:
        return self.rd.path

    @property
    def log_path(self) -> Path:
        return self.rd.path / "third_party.log"

    def __enter__(self) -> "CommandReport":
        root = getattr(self.args, "reports", "reports")
        hr.check_root(root, "--reports")  # ReportRootError: the caller refuses (exit 2)
        self.rd = hr.ReportDir.create(self.kind, root=root)
        self.guard = self._stack.enter_context(interrupt.catch_signals())
        self._stack.enter_context(noise.to_log(self.log_path, enabled=not self.verbose))
        return self

    def say(self, line: str) -> None:
        """A progress or result line (not under --quiet)."""
        if not self.quiet:
            print(line, flush=True)

    def record(self, result: dict) -> None:
        result = dict(result)
        result.setdefault("details", {})
        self.rd.record(result, self.meta, self.title, self.title)
        self._own_summary()
        if not result.get("passed") and not result.get("skipped"):
            self._failed = True

    def discard(self) -> None:
        """Bad input found after the folder was made: remove it, leave `latest`."""
        import shutil

        self._stack.close()
        shutil.rmtree(self.rd.path, ignore_errors=True)

    def _own_summary(self) -> None:
        if self.summary is not None:
            self.rd.write_text("summary.md", self.summary(self.rd._results, self.meta))
        if self.own_files is not None:
            self.own_files(self.rd)

    def fail(self) -> None:
        """A finding not written as a recorded check (exit 1)."""
        self._failed = True

    def __exit__(self, exc_type, exc, tb) -> bool:
        stop = exc if isinstance(exc, KeyboardInterrupt) else None
        self.guard.shield()
        try:
            self.meta["interrupted"] = stop is not None
            if stop is not None:
                self.meta["signal"] = interrupt.signal_name(stop)
            else:
                self.meta["finished"] = exc is None
            self.meta["passed"] = not self._failed and stop is None and exc is None
            self.rd.write_files(self.title, None, self.meta, self.title)
            self._own_summary()
            self.rd.update_latest()
        finally:
            self._stack.close()
        if stop is not None:
            self.stopped = stop
            self.exit_code = interrupt.exit_code(stop)
            print(f"{self.title}: interrupted by {interrupt.signal_name(stop)}; partial report: "
                  f"{self.rd.path}/summary.md", file=sys.stderr, flush=True)
            return True
        if exc is None:
            self.exit_code = 1 if self._failed else 0
            if self.log_path.exists() and self.log_path.stat().st_size and not self.verbose:
                self.say(f"third-party library output (warnings, logs, progress): {self.log_path}")
        return False
