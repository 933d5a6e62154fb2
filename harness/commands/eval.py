"""`moe-harness eval --config FILE [--model DIR] [--scheme S] [--limit N] [--dry-run]`

Exit codes: 0 every gate passed (or the checkpoint is absent and the run was
skipped, unless HARNESS_REQUIRE_CHECKPOINT=1); 1 a gate failed; 2 the config
or an argument is malformed (one line naming the file and field); 3 skipped
but HARNESS_REQUIRE_CHECKPOINT=1.

`--dry-run` runs every check the real run makes before loading a model
(config fields, tasks, --limit) and imports neither torch nor lm-eval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from harness.lmeval.config import VLLM_APPLIED, ConfigError, ModelNotPresent, check_limit, load, resolve_model_dir
from harness.lmeval.schemes import SCHEMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="accuracy config (suites/lm_eval/configs/*.yaml)")
    parser.add_argument("--model", default=None, help="local model folder (overrides the config; 'tiny-moe' = bundled)")
    parser.add_argument("--scheme", default=None, choices=SCHEMES, help="override the config's harness.scheme")
    parser.add_argument("--limit", default=None,
                        help="items per task (integer >= 1) or a fraction of them (0 < limit < 1); overrides the config")
    parser.add_argument("--dry-run", action="store_true", help="validate the config and print the plan; load nothing")
    parser.add_argument("--report-root", default="reports", help="where reports/<timestamp>-eval/ is made")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--verbose", action="store_true",
                        help="show third-party library output (otherwise in <report>/third_party.log)")


def plan(cfg, args) -> dict:
    scheme = args.scheme or cfg.scheme or "bf16"
    try:
        model_dir, model_status = resolve_model_dir(cfg, args.model), "present"
    except ModelNotPresent as e:
        model_dir, model_status = None, f"absent -> run would be SKIPPED: {e}"
    gates = []
    if cfg.one_sided:
        gates += [f"one_sided {t.name}:{m.name} >= {m.value}*(1-{cfg.rtol})" if m.value is not None
                  else f"one_sided {t.name}:{m.name} (record only)" for t in cfg.tasks for m in t.metrics]
    if cfg.paired:
        p = cfg.paired
        gates.append(f"paired vs {cfg.baseline_scheme}: {p.method}, allowance {p.allowance}, "
                     f"confidence {p.confidence}, resamples {p.resamples}, seed {p.seed}")
    if cfg.kl:
        gates.append(f"kl on {cfg.kl.task}: mean per-token KL <= {cfg.kl.max}")
    return {
        "config": cfg.path, "model_name": cfg.model_name, "model_dir": model_dir, "model": model_status,
        "scheme": scheme, "baseline_scheme": cfg.baseline_scheme, "backend": cfg.backend,
        "parallelize": cfg.parallelize,
        "tasks": cfg.task_names, "limit": args.limit if args.limit is not None else cfg.limit,
        "num_fewshot": cfg.num_fewshot, "seed": cfg.seed, "gates": gates, "warnings": cfg.warnings,
        "notes": cfg.notes,
        "checkpoint": None if cfg.checkpoint is None else {k: v for k, v in vars(cfg.checkpoint).items() if v is not None},
        "vllm_keys_not_applied": sorted(k for k in cfg.vllm_extra if k not in VLLM_APPLIED),
    }


def parse_limit(text):
    """--limit as lm-eval takes it: an integer count >= 1 or a fraction 0 < x < 1."""
    if text is None:
        return None
    if isinstance(text, (int, float)):  # called from Python with a number
        return check_limit("--limit", "value", text)
    try:
        value = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError("--limit", "value", f"expected an integer >= 1 or a fraction 0 < limit < 1, got {text!r}") from None
    return check_limit("--limit", "value", value)


def main(args) -> int:
    try:
        args.limit = parse_limit(args.limit)
        cfg = load(args.config)
    except ConfigError as e:
        print(f"moe-harness eval: invalid {'argument' if e.path == '--limit' else 'config'}: {e}", file=sys.stderr)
        return 2
    for w in cfg.warnings:
        print(f"warning: {w}", file=sys.stderr)
    for n in cfg.notes:
        print(f"note: {n}", file=sys.stderr)
    the_plan = plan(cfg, args)
    if args.dry_run:
        print(json.dumps(the_plan, indent=2))
        return 0
    if cfg.device is not None:
        from harness.util import devices

        try:
            devices.check_available(cfg.device)
        except devices.DeviceError as e:
            print(f"moe-harness eval: {cfg.path}: harness.device: {e}", file=sys.stderr)
            return 2
    from harness.util.report import ReportRootError, check_root

    try:
        check_root(args.report_root, "--report-root")
    except ReportRootError as e:
        print(f"moe-harness eval: {e}", file=sys.stderr)
        return 2
    from harness.util import interrupt, noise
    from harness.util.report import ReportDir

    from harness.lmeval.evaluate import Session, run_config

    # The hub/datasets cache belongs with the reports the user chose, not ./reports.
    os.environ.setdefault("HARNESS_CACHE_DIR", os.path.join(os.path.abspath(args.report_root), ".cache"))
    session = Session(disable_tqdm=args.quiet)
    rd = ReportDir.create("eval", root=args.report_root) if the_plan["model_dir"] else None
    log_path = rd.path / "third_party.log" if rd else None
    with interrupt.catch_signals() as guard:
        try:
            with noise.to_log(log_path, enabled=rd is not None and not args.verbose):
                result = run_config(cfg, session=session, model=args.model, scheme=args.scheme, limit=args.limit,
                                    progress=None if args.quiet else print)
        except KeyboardInterrupt as exc:  # SIGINT/SIGTERM: the report says so, no traceback
            guard.shield()
            if rd is not None:
                rd.write_files(f"lm-eval {cfg.path}", [], {"config": str(cfg.path), "interrupted": True,
                                                            "signal": interrupt.signal_name(exc), "finished": False})
            print(f"moe-harness eval: interrupted ({interrupt.signal_name(exc)})"
                  + (f"; report marked interrupted: {rd.path}" if rd is not None else ""), file=sys.stderr, flush=True)
            return interrupt.exit_code(exc)
    if result.get("skipped"):
        print(result["message"])
        return 3 if os.environ.get("HARNESS_REQUIRE_CHECKPOINT") == "1" else 0
    from harness.lmeval.report import write_lm_eval_report

    folder = write_lm_eval_report(rd, [result], title=f"lm-eval {cfg.path} [{result['details']['scheme']}]")
    for g in result["details"]["gates"]:
        status = "skip" if g.get("skipped") else ("PASS" if g["passed"] else "FAIL")
        print(f"{status:4s} {g['gate']:9s} {g['name']}: " + ", ".join(
            f"{k}={_short(v)}" for k, v in g["details"].items() if k not in ("rule",)))
    print(f"{'PASSED' if result['passed'] else 'FAILED'}: {result['message']}  (report: {folder})")
    if log_path is not None and log_path.exists() and log_path.stat().st_size:
        print(f"third-party library output (warnings, logs, progress): {log_path}")
    return 0 if result["passed"] else 1


def _short(v):
    return f"{v:.5g}" if isinstance(v, float) else v
