"""`moe-harness run`: the main job. Runs every check section on the default
device (GPU if present, else CPU) with a seeded sample, prints each check's
verdict the moment it finishes, writes
reports/<timestamp>-run/{results.json,summary.md,junit.xml} atomically after
every finished check, points reports/latest at it, and exits non-zero on any
failure.

Sections (in order; each may be skipped with --skip, or chosen with --only):
    formats  reference numerics: error bound, idempotence, SQNR floors, device == CPU
    kernels  Triton kernels == reference, bit for bit (harness.commands.run.kernels)
    moe      emulated MoE per scheme and backend, one family in turn, held to the library
             checks of harness.testing.checks (oracle, single QDQ, stages)
    lmeval   tiny-model lm-eval for every scheme, then the tiny random family
             models' KL and oracle gates, then every producer checkpoint
             (harness.lmeval, harness.checkpoints), one check per config

Interruption (Ctrl-C, or SIGTERM from `timeout` or a CI agent): the report
keeps every finished check and says "interrupted": true, `latest` moves to
it, and the exit status is 130 (SIGINT) or 143 (SIGTERM).

Output: third-party library noise (warnings, logs, progress bars of torch,
torchao, transformers, lm-eval) goes to <report>/third_party.log; --verbose
shows it on screen, --quiet prints only failures and the final summary.

Test-only seam: HARNESS_RUN_TEST_SECTIONS=<module> replaces the named
sections by the module's SECTIONS dict {section: fn(ctx, emit)}, so the
signal tests (suites/pipelines/test_run_interrupt.py) drive the real main
loop with tiny fake checks. Never set it for a real run.
"""
from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

from harness.util import interrupt
from harness.util import noise
from harness.util import report
from harness.commands.run import formats as format_checks
from harness.util import devices
from harness.commands.convention import add_common

OWN_REPORT = True   # the report, third-party log and signals are handled here (they predate the convention)

SECTIONS = ("formats", "kernels", "moe", "lmeval")
# pyproject extra a section's third-party imports come from (the others need only the core dependencies)
SECTION_EXTRAS = {"lmeval": "lmeval"}


def add_arguments(parser):
    parser.add_argument("--seed", type=int, default=0, help="seed of every random sample (recorded in the report)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--skip", action="append", choices=SECTIONS, default=[], help="skip these sections")
    add_common(parser)  # --reports, -q/-v, exit codes (harness/commands/convention.py)


def _formats_section(ctx, emit):
    for r in format_checks.iter_checks(seed=ctx["seed"], device=ctx["device"]):
        emit(r)


def _kernels_section(ctx, emit):
    mod = importlib.import_module("harness.commands.run.kernels")
    for r in mod.iter_checks(seed=ctx["seed"], device=ctx["device"]):
        emit(r)


def _moe_section(ctx, emit):
    mod = importlib.import_module("harness.commands.run.moe")
    for r in mod.iter_checks(seed=ctx["seed"], device=ctx["device"]):
        emit(r)


def _lmeval_section(ctx, emit):
    # The hub/datasets cache belongs with the reports the user chose, not ./reports.
    os.environ.setdefault("HARNESS_CACHE_DIR", str(ctx["reports_root"] / ".cache"))
    mod = importlib.import_module("harness.lmeval.evaluate")
    mod.run_tiny_all_schemes(ctx["report_dir"], on_result=emit, progress=ctx["progress"], families=True,
                             producers=True)


RUNNERS = {
    "formats": _formats_section,
    "kernels": _kernels_section,
    "moe": _moe_section,
    "lmeval": _lmeval_section,
}


def _runners() -> dict:
    fake = os.environ.get("HARNESS_RUN_TEST_SECTIONS")
    if not fake:
        return RUNNERS
    return {**RUNNERS, **importlib.import_module(fake).SECTIONS}


def _brief(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(report.to_jsonable(v), separators=(",", ":"))[:40]
    return str(v)


def _status(r: dict) -> str:
    return "PASS" if r.get("passed") else ("SKIP" if r.get("skipped") else "FAIL")


def _print_row(section: str, r: dict):
    details = r.get("details") or {}
    if r.get("message") and (not r.get("passed") or "gates" in details):
        brief = str(r["message"]).splitlines()[0][:200]  # a failure's reason; an lm-eval run's gate verdict
    else:
        brief = ", ".join(f"{k}={_brief(v)}" for k, v in list(details.items())[:4])
    took = f"  ({r['time']:.1f}s)" if isinstance(r.get("time"), (int, float)) else ""
    print(f"{_status(r):4}  {section:8}  {r['name']:<48} {brief}{took}", flush=True)


def _check_args(args) -> tuple[torch.device, list[str]]:
    """Everything wrong with the command line, before any check runs (ValueError, one line)."""
    device = devices.check_available(args.device) if args.device else ("cuda" if torch.cuda.is_available() else "cpu")
    sections = [s for s in (args.only or SECTIONS) if s not in args.skip]
    if not sections:
        both = sorted(set(args.only or ()) & set(args.skip))
        raise ValueError(f"--only and --skip leave no section to run (both name {', '.join(both)})")
    report.check_root(args.reports, "--reports")
    return torch.device(device), sections


def main(args) -> int:
    try:
        device, sections = _check_args(args)
    except ValueError as e:  # DeviceError and ReportRootError included
        print(f"moe-harness run: {e}", file=sys.stderr)
        return 2
    rd = report.ReportDir.create("run", root=args.reports)
    meta = {
        "command": "moe-harness run " + " ".join(sys.argv[2:]),
        "seed": args.seed,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "sections": sections,
        "python": platform.python_version(),
        "finished": False,
    }
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    title = suite = "moe-harness run"

    def say(text: str):
        if not quiet:
            print(text, flush=True)

    def emit(r, section):
        r = dict(r, section=section)
        r.setdefault("details", {})
        rd.record(r, meta, title, suite)  # all three files, before the verdict is shown
        if not quiet or _status(r) == "FAIL":
            _print_row(section, r)

    ctx = {"seed": args.seed, "device": device, "report_dir": rd, "reports_root": Path(args.reports).resolve(),
           "progress": say}
    runners = _runners()
    log_path = rd.path / "third_party.log"
    say(f"moe-harness run: device {device}, seed {args.seed}, report {rd.path}")
    stop = None
    with interrupt.catch_signals() as guard:
        try:
            with noise.to_log(log_path, enabled=not verbose):
                for section in sections:
                    _run_section(section, runners[section], ctx, lambda r, s=section: emit(r, s), meta, say)
                guard.shield()
        except KeyboardInterrupt as exc:  # interrupt.Interrupted for SIGTERM too
            stop = exc
        results = rd._results
        failed = [r for r in results if not r.get("passed") and not r.get("skipped")]
        meta["passed"] = not failed and stop is None
        meta["interrupted"] = stop is not None
        if stop is not None:
            meta["signal"] = interrupt.signal_name(stop)
            rd.write_files(title, None, meta, suite)
        else:
            meta["finished"] = True
            rd.write_report(title, None, meta, suite_name=suite)
        rd.update_latest()
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed -- report: {rd.path}/summary.md", flush=True)
    if not verbose and log_path.exists() and log_path.stat().st_size:
        print(f"third-party library output (warnings, logs, progress): {log_path}", flush=True)
    if stop is not None:
        print(f"moe-harness run: interrupted by {interrupt.signal_name(stop)} after {len(results)} checks; "
              f"partial report: {rd.path}/summary.md", file=sys.stderr, flush=True)
        return interrupt.exit_code(stop)
    return 1 if failed else 0


def _run_section(section, runner, ctx, emit, meta, say):
    t0 = time.perf_counter()
    count = [0]

    def counted(r):
        count[0] += 1
        emit(r)

    try:
        runner(ctx, counted)
    except Exception as e:  # one broken section must not lose the others' results
        message = f"{type(e).__name__}: {e}"
        if isinstance(e, ModuleNotFoundError) and section in SECTION_EXTRAS:
            message += f" (install it: pip install -e '.[{SECTION_EXTRAS[section]}]')"
        counted({"name": f"{section}: crashed", "passed": False, "message": message,
                 "details": {"traceback": traceback.format_exc()[-4000:]}})
    seconds = round(time.perf_counter() - t0, 2)
    meta.setdefault("section_seconds", {})[section] = seconds
    say(f"      {section}: {count[0]} checks in {seconds:.1f}s")
