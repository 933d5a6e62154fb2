"""`moe-harness bench conform`: wall time of `moe-harness conform` over every
installed adapter, as a user or CI step starts it (a fresh interpreter, so
package imports count). JSON to stdout.

The target (TARGET_S): under 5 minutes on a 2-core CPU machine for all
installed adapters. A benchmark, never a test verdict.
"""
from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.commands.convention import report_dir

TARGET_S = 300.0


def add_arguments(parser) -> None:
    parser.add_argument("--device", default="cpu", help="device handed to conform (default cpu)")
    parser.add_argument("--impl", action="append", default=None, metavar="NAME",
                        help="implementations (default: every shipped one, as conform does)")
    parser.add_argument("--conform-reports", default=None, metavar="DIR",
                        help="reports root of the timed conform run (default: a temporary folder, removed)")


def _load_avg() -> list:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def run(device: str = "cpu", impls=None, reports=None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = reports or tmp
        argv = [sys.executable, "-m", "harness.cli", "conform", "--device", device, "--reports", root]
        for i in impls or []:
            argv += ["--impl", i]
        load_before = _load_avg()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ), check=False)
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU seconds of the run: on a shared machine wall time mostly measures the neighbours
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        results = Path(root) / "latest" / "results.json"
        data = json.loads(results.read_text()) if results.is_file() else {}
    impls_run = [{"name": i["name"], "version": i["version"], "cells": i["cells"], "seconds": i["seconds"]}
                 for i in data.get("implementations", [])]
    return {
        "bench": "conform", "command": "moe-harness conform " + " ".join(argv[4:]),
        "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "target_s": TARGET_S, "within_target": wall <= TARGET_S,
        "exit_code": out.returncode, "conform_seconds": data.get("meta", {}).get("seconds"),
        "cells": len(data.get("cells", [])), "implementations": impls_run,
        "skipped": data.get("skipped", []), "load_avg_before": load_before, "load_avg_after": _load_avg(),
        "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "stderr_tail": out.stderr.strip()[-800:] if out.returncode not in (0, 1) else "",
    }


def main(args) -> int:
    result = run(args.device, args.impl, args.conform_reports)
    report_dir(args, "bench-conform").write_json("bench_conform.json", result)
    print(json.dumps(result, indent=2))
    return 0
