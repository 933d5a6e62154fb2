"""`python -m harness.lmeval.measure [--limit N]`: run every tiny-<scheme> config
on the bundled model and write reports/<timestamp>-tiny-all/lm_eval/ -- the
run whose figures go into the configs (harness.lmeval.expected) and docs."""

from __future__ import annotations

import argparse
import json
import time
from harness.util.report import ReportDir
from harness.lmeval.evaluate import run_tiny_all_schemes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.lmeval.measure")
    p.add_argument("--limit", type=int, default=600)
    p.add_argument("--schemes", default=None, help="comma-separated subset")
    p.add_argument("--reports", default="reports")
    args = p.parse_args(argv)


    rd = ReportDir.create("tiny-all", root=args.reports)
    t0 = time.perf_counter()
    results = run_tiny_all_schemes(rd, limit=args.limit,
                                   schemes=args.schemes.split(",") if args.schemes else None)
    for r in results:
        d = r["details"]
        kl = next((g["details"].get("mean_kl") for g in d["gates"] if g["gate"] == "kl"), None)
        print(json.dumps({"scheme": d["scheme"], "passed": r["passed"], "kl": kl,
                          **{k: v["scheme"] for k, v in d["metrics"].items()}}))
    print(f"wall {time.perf_counter() - t0:.1f}s -> {rd.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
