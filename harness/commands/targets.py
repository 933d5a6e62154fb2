"""`moe-harness targets`: compile every Triton kernel ahead of time for gfx942,
gfx950, sm_90 and sm_100 (harness.aot.compile does the work; docs/targets.md)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.aot.compile import COVERAGES, TARGETS, default_cache_dir, failed, run, table
from harness.commands.convention import report_dir
from harness.util.interrupt import say_line
from harness.util.report import atomic_write_json

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
    parser.add_argument("--isa", action="store_true",
                        help="also record each launch's machine instructions by opcode (SASS / AMDGCN) and print "
                             "their counts")
    parser.add_argument("--json", metavar="PATH", help="also write the JSON document here")
    parser.add_argument("--cache-dir", default=None, help=f"result cache (default: {default_cache_dir()})")
    parser.add_argument("--no-cache", action="store_true", help="recompile everything and store nothing")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every row, not only failures")


def _command_line(args) -> str:
    parts = ["moe-harness targets", "--targets " + ",".join(args.targets), f"--coverage {args.coverage}",
             f"--jobs {args.jobs}"]
    if args.kernels:
        parts.append("--kernels " + ",".join(args.kernels))
    if args.configs:
        parts.append("--configs " + ",".join(args.configs))
    if args.isa:
        parts.append("--isa")
    return " ".join(parts)


def main(args) -> int:
    cache = None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    if args.jobs < 1:
        print("moe-harness targets: --jobs must be >= 1", file=sys.stderr)
        return 2

    def progress(n, total):
        if (n == total or n % 50 == 0) and not getattr(args, "quiet", False):
            say_line(f"compiled {n}/{total}")

    try:
        doc = run(args.targets, args.kernels, args.configs, args.jobs, cache, progress, args.coverage, args.isa)
    except (ValueError, RuntimeError) as exc:
        print(f"moe-harness targets: {exc}", file=sys.stderr)
        return 2
    doc["meta"]["command"] = _command_line(args)
    print(table(doc, args.verbose))
    if args.json:
        atomic_write_json(args.json, doc)
    rd = report_dir(args, "targets")
    rd.write_json("targets.json", doc)
    bad = failed(doc)
    rep = getattr(args, "report", None)
    if rep is not None:
        for r in bad:
            rep.record({"name": f"{r.get('target')} {r.get('kernel')} {r.get('config', '')}".strip(), "passed": False,
                        "message": str(r.get("status")), "details": r})
        rep.record({"name": "targets: every launch compiled", "passed": not bad,
                    "details": {"rows": len(doc.get("results", [])), "failed": len(bad)}})
    print(f"report: {rd.path / 'targets.json'}")
    if bad:
        print(f"FAILED: {sum(r['status'] == 'fail' for r in bad)} failed, "
              f"{sum(r['status'] == 'overflow' for r in bad)} over the shared-memory limit", file=sys.stderr)
        return 1
    return 0
