"""`moe-harness run`: the main job. Runs every check section on the default
device (GPU if present, else CPU) with a seeded sample, prints a table, writes
reports/<timestamp>-run/{results.json,summary.md,junit.xml} atomically after
every finished check, points reports/latest at it, and exits non-zero on any
failure.

Sections (in order; each may be skipped with --skip, or chosen with --only):
    formats  reference numerics: error bound, idempotence, SQNR floors, device == CPU
    kernels  Triton kernels == reference, bit for bit (harness.kernels.checks)
    moe      emulated MoE vs the float64 reference per scheme (harness.moe.checks)
    lmeval   tiny-model lm-eval for every scheme (harness.lmeval)
"""
from __future__ import annotations

import importlib
import json
import platform
import sys
import time
import traceback

import torch

from harness import report
from harness.formats import checks as format_checks

SECTIONS = ("formats", "kernels", "moe", "lmeval")


def add_arguments(parser):
    parser.add_argument("--seed", type=int, default=0, help="seed of every random sample (recorded in the report)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--skip", action="append", choices=SECTIONS, default=[], help="skip these sections")
    parser.add_argument("--reports", default="reports", help="reports root folder")


def _kernels_section(ctx):
    mod = importlib.import_module("harness.kernels.checks")
    return mod.run_checks(seed=ctx["seed"], device=ctx["device"])


def _moe_section(ctx):
    mod = importlib.import_module("harness.moe.checks")
    return mod.run_checks(seed=ctx["seed"], device=ctx["device"])


def _lmeval_section(ctx):
    mod = importlib.import_module("harness.lmeval")
    return mod.run_tiny_all_schemes(ctx["report_dir"])


RUNNERS = {
    "formats": lambda ctx: format_checks.run_checks(seed=ctx["seed"], device=ctx["device"]),
    "kernels": _kernels_section,
    "moe": _moe_section,
    "lmeval": _lmeval_section,
}


def _brief(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(report.to_jsonable(v), separators=(",", ":"))[:40]
    return str(v)


def _print_row(section: str, r: dict):
    status = "PASS" if r.get("passed") else ("SKIP" if r.get("skipped") else "FAIL")
    details = r.get("details") or {}
    brief = ", ".join(f"{k}={_brief(v)}" for k, v in list(details.items())[:4])
    print(f"{status:4}  {section:8}  {r['name']:<48} {brief}", flush=True)


def _check_args(args) -> tuple[torch.device, list[str]]:
    """Everything wrong with the command line, before any check runs (ValueError, one line)."""
    from harness import devices

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
    }
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    ctx = {"seed": args.seed, "device": device, "report_dir": rd}
    print(f"moe-harness run: device {device}, seed {args.seed}, report {rd.path}", flush=True)
    results = []
    for section in sections:
        t0 = time.perf_counter()
        try:
            section_results = RUNNERS[section](ctx)
        except ModuleNotFoundError as e:
            # A section whose package is not built yet is reported, never hidden.
            section_results = [{"name": f"{section}: not available", "passed": False,
                                "message": f"{type(e).__name__}: {e}"}]
        except Exception as e:  # one broken section must not lose the others' results
            section_results = [{"name": f"{section}: crashed", "passed": False,
                                "message": f"{type(e).__name__}: {e}",
                                "details": {"traceback": traceback.format_exc()[-4000:]}}]
        for r in section_results:
            r = dict(r, section=section)
            r.setdefault("details", {})
            results.append(r)
            rd.record(r, meta)
            _print_row(section, r)
        meta.setdefault("section_seconds", {})[section] = round(time.perf_counter() - t0, 2)
    failed = [r for r in results if not r.get("passed") and not r.get("skipped")]
    meta["passed"] = not failed
    rd.write_report("moe-harness run", results, meta, suite_name="moe-harness-run")
    rd.update_latest()
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed -- report: {rd.path}/summary.md", flush=True)
    return 1 if failed else 0
