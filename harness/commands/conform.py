"""`moe-harness conform`: run implementations against the reference, stage by
stage, over input families from the format table; write reports/<ts>-conform/
{results.json, summary.md, junit.xml, heatmap.png}; print, per failing cell,
who is right (the verdict) and the minimal block, as summary.md has them.
Each implementation runs in a child process with time limits (--in-process to
debug); exit 1 when a divergence is not explained by the registry
(divergences.yaml) or an implementation failed (crash, exit, signal, timeout,
input mutation), 2 on bad arguments, 130/143 when interrupted (the report of
what finished is written and marked interrupted). `--moe` holds MoE layers to
the bug-class checks instead (harness.commands.conform_moe)."""
from __future__ import annotations

import os
import platform
import sys
import time

import torch

import harness.formats as hf

from harness.commands import conform_moe
from harness.commands.convention import report_dir
from harness.conformance import divergences as dv
from harness.conformance import isolation
from harness.conformance import report as conf_report
from harness.conformance.registry import available_names
from harness.conformance.runner import run_conformance

PROGRESS_EVERY = 25   # cells between progress lines


def add_arguments(parser):
    parser.add_argument("--impl", action="append", default=None, metavar="NAME",
                        help="implementation name or module:object (repeatable; default: every shipped/registered one)")
    parser.add_argument("--formats", nargs="+", default=None, metavar="FMT",
                        help=f"formats to test (default: all of {', '.join(hf.FORMAT_NAMES)}); comma-separated also works")
    parser.add_argument("--device", default="cpu", help="torch device: cpu or cuda (default cpu)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random input families (recorded)")
    parser.add_argument("--random-blocks", type=int, default=256, help="random-family blocks per format and dtype")
    parser.add_argument("--registry", default=None, help="YAML registry of known divergences (default: the shipped one)")
    parser.add_argument("--list", action="store_true", help="list the implementations and exit")
    conform_moe.add_arguments(parser)
    parser.add_argument("--cell-timeout", type=float, default=isolation.CELL_TIMEOUT_S, metavar="S",
                        help=f"seconds one cell of one implementation may take (default {isolation.CELL_TIMEOUT_S:g})")
    parser.add_argument("--impl-timeout", type=float, default=isolation.IMPL_TIMEOUT_S, metavar="S",
                        help=f"seconds one implementation may take in all (default {isolation.IMPL_TIMEOUT_S:g})")
    parser.add_argument("--in-process", action="store_true",
                        help="run implementations in this process (no child process, no time limits; debugging)")


def prints_only(args) -> bool:
    return bool(args.list)


def _formats(arg):
    if arg is None:
        return None
    out = [f for a in arg for f in a.split(",") if f]
    for f in out:
        hf.get_format(f)
    return out


def main(args) -> int:
    # CUDA availability through NVML: cudaGetDeviceCount would initialize the
    # driver in this process, which no forked child could then use
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    if args.moe:
        return conform_moe.main(args)
    if args.list:
        for n in available_names():
            print(n)
        return 0
    try:
        formats = _formats(args.formats)
        registry = dv.load_registry(args.registry) if args.registry else dv.default_registry()
        device = torch.device(args.device)
        limits = isolation.Limits(cell_timeout_s=args.cell_timeout, impl_timeout_s=args.impl_timeout)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"moe-harness conform: {e}", file=sys.stderr)
        return 2
    if device.type == "cuda" and not torch.cuda.is_available():
        print("moe-harness conform: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    names = args.impl or available_names()
    quiet = getattr(args, "quiet", False)
    rep = getattr(args, "report", None)
    t0 = time.perf_counter()

    counts: dict = {}

    def progress(impl, cell, res):
        bad = list(conf_report.unexplained({"cells": [res]}))
        n, failed = counts.get(impl.name, (0, 0))
        counts[impl.name] = (n + 1, failed + bool(bad))
        for c, stage, f in bad:
            line = (f"{impl.name} {cell.label()} {stage}: ERROR {f['error_stage']}" if "error_stage" in f
                    else conf_report.plain(conf_report.finding_line(c, stage, f)))
            print(f"FAIL  {line}", flush=True)
        if not quiet and (n + 1) % PROGRESS_EVERY == 0:
            print(f"      {impl.name}: {n + 1} cells, {failed + bool(bad)} failing, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
        if rep is not None:
            rep.record({"name": f"{impl.name} {cell.label()}", "passed": not bad,
                        "message": "\n".join(conf_report.plain(conf_report.finding_line(c, s, f))
                                             for c, s, f in bad if "error_stage" not in f)
                        or ("\n".join(f["error_stage"] for _, _, f in bad)),
                        "details": {"match": _rates(res)}})

    try:
        data = run_conformance(names, formats=formats, device=device, seed=args.seed,
                               random_blocks=args.random_blocks, registry=registry, progress=progress,
                               isolate=not args.in_process, limits=limits)
    except (ValueError, TypeError) as e:  # unknown implementation, bad --impl object
        print(f"moe-harness conform: {e}", file=sys.stderr)
        return 2
    elapsed = round(time.perf_counter() - t0, 2)
    meta = {"command": "moe-harness conform " + " ".join(sys.argv[2:]), "seed": args.seed, "device": str(device),
            "torch": torch.__version__, "python": platform.python_version(), "seconds": elapsed,
            "registry": args.registry or str(dv.REGISTRY_PATH), "finished": "interrupted" not in data}
    if "interrupted" in data:
        meta["interrupted"] = data["interrupted"]
    rd = report_dir(args, "conform")
    if rep is not None:
        rep.own_files = lambda rd: conf_report.write(rd, data, meta, rd._results)  # its results.json and summary.md
    conf_report.write(rd, data, meta, rd._results)
    for s in data["skipped"]:
        print(f"SKIP  {s['name']}: {s['reason']}")
    for i in data["implementations"]:
        why = f" -- {i['error']}" if i.get("error") else ""
        why += f" (ran {i['isolation']})" if i.get("isolation") else ""
        print(f"{'FAIL' if i['failed'] else 'PASS'}  {i['name']} {i['version']}: {i['cells']} cells, {i['seconds']} s{why}")
    if "interrupted" in data:
        print(f"INTERRUPTED ({data['interrupted']}) after {elapsed} s -- report of what finished: {rd.path}/summary.md",
              flush=True)
        return data["exit_code"]
    print(f"{'FAILED' if data['failed'] else 'passed'} in {elapsed} s -- report: {rd.path}/summary.md", flush=True)
    return 1 if data["failed"] else 0


def _rates(res: dict) -> str:
    return ", ".join(f"{stage} {100 * st['matched'] / st['compared']:.4g}%" for stage, st in res["stages"].items()
                     if st.get("status") == "ok" and st.get("compared"))
