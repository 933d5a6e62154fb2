"""`moe-harness bench config-validate`: wall time of `moe-harness eval --config FILE --dry-run`,
each run a fresh interpreter as a user or CI step would start it. JSON to stdout.

Also records which heavy modules the dry run imported (none is the contract:
config validation must not pay for torch or lm-eval)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness.commands.convention import report_dir

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "suites" / "lm_eval" / "configs" / "tiny-nvfp4.yaml"
TARGET_S = 1.5
HEAVY = ("torch", "lm_eval", "transformers", "numpy")

_CHILD = """
import json, sys
from harness import cli
rc = cli.main(sys.argv[1:])
sys.stderr.write("\\nBENCH " + json.dumps({"rc": rc, "heavy": [m for m in %r if m in sys.modules]}) + "\\n")
""" % (HEAVY,)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="config to validate (default: tiny-nvfp4)")
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters to time (default 5)")


def _one(config: str) -> tuple[float, dict]:
    argv = [sys.executable, "-c", _CHILD, "eval", "--config", config, "--dry-run"]
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - t0
    line = next((ln for ln in out.stderr.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"the dry run did not finish: {out.stderr.strip()[-500:]}")
    return wall, json.loads(line[6:])


def run(config: str, runs: int) -> dict:
    walls, info = [], {}
    for _ in range(runs):
        wall, info = _one(config)
        walls.append(wall)
    median = statistics.median(walls)
    return {
        "bench": "config-validate", "command": f"moe-harness eval --config {config} --dry-run",
        "runs": runs, "wall_s": [round(w, 3) for w in walls], "median_s": round(median, 3),
        "max_s": round(max(walls), 3), "target_s": TARGET_S, "within_target": max(walls) <= TARGET_S,
        "exit_code": info.get("rc"), "heavy_modules_imported": info.get("heavy"),
        "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def main(args) -> int:
    if args.runs < 1:
        print(f"moe-harness bench config-validate: --runs {args.runs}: must be >= 1", file=sys.stderr)
        return 2
    result = run(args.config, args.runs)
    report_dir(args, "bench-config-validate").write_json("bench_config_validate.json", result)
    print(json.dumps(result, indent=2))
    return 0
