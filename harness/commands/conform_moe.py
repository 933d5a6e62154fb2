"""`moe-harness conform --moe NAME|module:object`: MoE implementations held to
the bug-class checks (harness.conformance.moe); reports/<ts>-conform-moe/
{results.json, summary.md, junit.xml}; exit 1 when a check fails or an
implementation errors, 2 on bad arguments. Part of the conform command
(conform.py hands over when --moe is given)."""
from __future__ import annotations

import os
import platform
import sys
import time

import torch

from harness.commands.convention import report_dir

from harness.conformance.moe import report as moe_report
from harness.conformance.moe.checks import CHECK_NAMES
from harness.conformance.moe.registry import PLANTED, available_names, default_names
from harness.conformance.moe.runner import run_moe_conformance


def add_arguments(parser):
    parser.add_argument("--moe", action="append", default=None, metavar="NAME",
                        help="MoE implementation name or module:object to hold to the bug-class checks (repeatable; "
                             "'all': every shipped and registered one but the planted-bug layers; with --list: "
                             "list them)")
    parser.add_argument("--moe-schemes", nargs="+", default=None, metavar="SCHEME",
                        help="MoE schemes to run (default: every scheme each implementation declares)")
    parser.add_argument("--moe-checks", nargs="+", default=None, metavar="CHECK",
                        help=f"checks to run (default: all of {', '.join(CHECK_NAMES)})")
    parser.add_argument("--moe-full", action="store_true",
                        help="every routing x activation x dtype per scheme (default: paired round-robin)")


def _split(arg):
    return None if arg is None else [x for a in arg for x in a.split(",") if x]


def main(args) -> int:
    quantizer_only = [o for o, v in (("--impl", args.impl), ("--formats", args.formats),
                                     ("--registry", args.registry)) if v]
    if quantizer_only:
        print(f"moe-harness conform: {', '.join(quantizer_only)} select quantizer runs; --moe runs MoE "
              "implementations (give one or the other)", file=sys.stderr)
        return 2
    if args.list:
        for n in available_names():
            print(n + ("  (planted bug)" if n in PLANTED else ""))
        return 0
    names = [x for n in _split(args.moe) for x in (default_names() if n == "all" else [n])]
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        print(f"moe-harness conform: --device: {e}", file=sys.stderr)
        return 2
    if device.type == "cuda" and not torch.cuda.is_available():
        print("moe-harness conform: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2

    # Every problem is a few KiB: more torch threads only contend (10x slower
    # on a busy 2-core machine). OMP_NUM_THREADS in the environment wins.
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)

    def progress(impl, r):
        if r["status"] in ("fail", "error"):
            c = r["cell"]
            print(f"{r['status'].upper():<5} {impl.name} {r['check']} [{c['scheme']} {c['routing']} {c['activation']} "
                  f"{c['dtype']}]: {r['message'][:300]}", flush=True)

    t0 = time.perf_counter()
    try:
        data = run_moe_conformance(names, device=device, seed=args.seed, schemes=_split(args.moe_schemes),
                                   checks=_split(args.moe_checks), full=args.moe_full, progress=progress)
    except (ValueError, TypeError) as e:  # unknown implementation, scheme or check; bad module:object
        print(f"moe-harness conform: {e}", file=sys.stderr)
        return 2
    elapsed = round(time.perf_counter() - t0, 2)
    meta = {"command": "moe-harness conform " + " ".join(sys.argv[2:]), "seed": args.seed, "device": str(device),
            "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
            "seconds": elapsed}
    rd = report_dir(args, "conform-moe")
    rep = getattr(args, "report", None)
    if rep is not None:  # the command's report folder: its results.json and summary.md are the MoE report
        rep.own_files = lambda rd: moe_report.write(rd, data, meta)
    moe_report.write(rd, data, meta)
    for s in data["skipped"]:
        print(f"SKIP  {s['name']}: {s['reason']}")
    table = moe_report.verdict_table(data)
    for i in data["implementations"]:
        print(f"{'FAIL' if i['failed'] else 'PASS'}  {i['name']} {i['version']}: {i['cells']} cells, {i['seconds']} s")
        for c in data["checks"]:
            print(f"      {c:<15} {table[(i['name'], c)].replace('**', '')}")
    print(f"{'FAILED' if data['failed'] else 'passed'} in {elapsed} s -- report: {rd.path}/summary.md", flush=True)
    return 1 if data["failed"] else 0
