"""`moe-harness targets`: compile every Triton kernel ahead of time for gfx942,
gfx950, sm_90 and sm_100 (harness.aot.compile does the work; docs/targets.md).
SIGINT/SIGTERM: the compile workers get SIGTERM, a grace period, SIGKILL;
exit 130/143 with one line (finished compiles stay in the cache)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.aot.compile import COVERAGES, TARGETS, default_cache_dir, failed, run, table
from harness.util import interrupt
from harness.util.report import ReportDir, atomic_write_json

def _csv(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--targets", type=_csv, default=list(TARGETS),
                        help=f"comma-separated targets (default: all of {','.join(TARGETS)})")
    parser.add_argument("--kernels", type=_csv, default=None, help="only kernels matching these glob patterns")
    parser.add_argument("--configs", type=_csv, default=None,
                        help="only launch configurations matching these glob patterns")
    parser.add_argument("--coverage", choices=COVERAGES, default="all",
                        help="all: every launch configuration (default); pairs: every pair of argument types and "
                             "constexpr/option values that occur together (make test's quick gate)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="compile in this many processes (default: min(2, CPUs))")
    parser.add_argument("--json", metavar="PATH", help="also write the JSON document here")
    parser.add_argument("--cache-dir", default=None, help=f"result cache (default: {default_cache_dir()})")
    parser.add_argument("--no-cache", action="store_true", help="recompile everything and store nothing")
    parser.add_argument("--no-report", action="store_true", help="write no reports/<timestamp>-targets folder")
    parser.add_argument("--report-root", default="reports")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every row, not only failures")


def _command_line(args) -> str:
    parts = ["moe-harness targets", "--targets " + ",".join(args.targets), f"--coverage {args.coverage}",
             f"--jobs {args.jobs}"]
    if args.kernels:
        parts.append("--kernels " + ",".join(args.kernels))
    if args.configs:
        parts.append("--configs " + ",".join(args.configs))
    return " ".join(parts)


def main(args) -> int:
    cache = None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    if args.jobs < 1:
        print("moe-harness targets: --jobs must be >= 1", file=sys.stderr)
        return 2

    def progress(n, total):
        if n == total or n % 50 == 0:
            print(f"compiled {n}/{total}", file=sys.stderr, flush=True)

    with interrupt.catch_signals():
        try:
            doc = run(args.targets, args.kernels, args.configs, args.jobs, cache, progress, args.coverage)
        except (ValueError, RuntimeError) as exc:
            print(f"moe-harness targets: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:  # SIGINT/SIGTERM: workers stopped (compile._stop_pool)
            print(f"moe-harness targets: interrupted ({interrupt.signal_name(exc)}); compile workers stopped, "
                  "every finished compile kept in the cache, no report written", file=sys.stderr, flush=True)
            return interrupt.exit_code(exc)
    doc["meta"]["command"] = _command_line(args)
    print(table(doc, args.verbose))
    if args.json:
        atomic_write_json(args.json, doc)
    if not args.no_report:
        rd = ReportDir.create("targets", root=args.report_root)
        rd.write_json("targets.json", doc)
        print(f"report: {rd.path / 'targets.json'}")
    bad = failed(doc)
    if bad:
        print(f"FAILED: {sum(r['status'] == 'fail' for r in bad)} failed, "
              f"{sum(r['status'] == 'overflow' for r in bad)} over the shared-memory limit", file=sys.stderr)
        return 1
    return 0
