"""`moe-harness eval --config FILE [--model DIR] [--scheme S] [--limit N] [--task-map NAME=TASK] [--dry-run]`

Runs one accuracy config: lm-eval on the bf16 baseline and on the scheme
(same loaded model, same items), the KL measurements, and every gate of
the plan (harness.lmeval.gate_plan). `--dry-run` makes every check the run
makes before it loads a model (config fields, the model folder, where the
scheme comes from, --scheme against the config's thresholds, task names and
task data, --limit), prints the plan with the gates exactly as the run
evaluates them, and imports neither torch nor lm-eval.

The scheme is --scheme, else harness.scheme, else the checkpoint's own
(its config.json quantization_config, vLLM's meaning of a config); a float
model with no scheme is refused. A model that is neither a local folder nor
in the local hub cache is refused unless marked optional
(--model-optional, harness.model_optional), which skips the run. A task
whose data is not on this machine is refused in one line naming the task and
how to provide its data; `--task-map gsm8k=tiny_add_gsm` runs the config's
gsm8k as the bundled stand-in instead (its values recorded, not gated).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from harness.commands.convention import CommandReport, add_common, refuse
from harness.lmeval import gate_plan
from harness.lmeval.config import (FROM_CHECKPOINT, VLLM_APPLIED, ConfigError, ModelNotPresent, check_limit,
                                   check_scheme_override, check_task_data, load, parse_task_map,
                                   quantization_config, resolve_model_dir, scheme_source)
from harness.lmeval.schemes import SCHEMES

SKIPPED_REQUIRED = 3
OWN_REPORT = True   # _run writes the report through CommandReport with eval's own summary


def prints_only(args) -> bool:
    return bool(args.dry_run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="accuracy config (suites/lm_eval/configs/*.yaml or vLLM's)")
    parser.add_argument("--model", default=None, help="local model folder (overrides the config; 'tiny-moe' = bundled)")
    parser.add_argument("--scheme", default=None, choices=SCHEMES,
                        help="the scheme to emulate (default: harness.scheme, else the checkpoint's own)")
    parser.add_argument("--limit", default=None,
                        help="items per task (integer >= 1) or a fraction of them (0 < limit < 1); overrides the config")
    parser.add_argument("--include-path", action="append", default=[], metavar="DIR",
                        help="a folder of lm-eval task YAMLs, searched before lm-eval's registry (repeatable)")
    parser.add_argument("--task-map", action="append", default=[], metavar="NAME=TASK",
                        help="run the config's task NAME as TASK, e.g. gsm8k=tiny_add_gsm (the bundled stand-in); "
                             "the config's values for NAME are recorded, not gated (repeatable)")
    parser.add_argument("--model-optional", action="store_true",
                        help="an absent model skips the run (exit 0) instead of being an error")
    parser.add_argument("--record-only", action="store_true",
                        help="measure every gate, fail none (e.g. --scheme on a config written for another scheme)")
    parser.add_argument("--dry-run", action="store_true", help="validate the config and print the plan; load nothing")
    add_common(parser, extra_codes=((SKIPPED_REQUIRED, "the model is absent (optional) and "
                                                       "HARNESS_REQUIRE_CHECKPOINT=1"),))


def plan(cfg, args) -> dict:
    """Every check the run makes before loading, and the gates it will evaluate.
    ConfigError / ModelNotPresent (not optional) for bad input."""
    try:
        model_dir, model_status = resolve_model_dir(cfg, args.model, optional=args.model_optional), "present"
    except ModelNotPresent as e:
        if not e.optional:
            raise
        model_dir, model_status = None, f"absent -> run SKIPPED: {e}"
    source = scheme_source(cfg, args.scheme, model_dir)
    check_scheme_override(cfg, args.scheme, args.record_only)
    check_task_data(cfg)
    quantized = model_dir is not None and cfg.checkpoint is None and quantization_config(model_dir) is not None
    scheme = args.scheme or cfg.scheme
    if quantized or scheme is None:
        qm = (quantization_config(model_dir) or {}).get("quant_method") if model_dir else None
        shown = f"the checkpoint's own (quantization_config quant_method {qm!r}; read when the run starts)"
        if scheme is not None:
            shown = f"{scheme} (the checkpoint's quantization_config must name it; read when the run starts)"
    else:
        shown = scheme
    specs = gate_plan.plan_gates(cfg, scheme or FROM_CHECKPOINT, baseline=not quantized, record_only=args.record_only)
    return {
        "config": cfg.path, "model_name": cfg.model_name, "model_dir": model_dir, "model": model_status,
        "scheme": shown, "scheme_from": source,
        "baseline_scheme": None if quantized else cfg.baseline_scheme, "backend": cfg.backend,
        "parallelize": cfg.parallelize,
        "tasks": cfg.task_names, "task_map": {standin: f"runs for {name}" for standin, name in cfg.task_map.items()},
        "include_paths": cfg.include_paths,
        "limit": args.limit if args.limit is not None else cfg.limit,
        "num_fewshot": cfg.num_fewshot, "seed": cfg.seed, "gates": [s.describe() for s in specs],
        "warnings": cfg.warnings, "notes": cfg.notes + ([
            f"{model_dir} is a quantized checkpoint with no float weights: no {cfg.baseline_scheme} baseline runs, "
            "so the paired and KL-vs-baseline gates are not planned"] if quantized else []),
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


def _what(e: ConfigError) -> str:
    return "argument" if e.path.startswith("--") else "config"


def main(args) -> int:
    for name in ("model_optional", "record_only", "quiet", "verbose"):
        setattr(args, name, getattr(args, name, False))
    args.include_path = getattr(args, "include_path", None) or []
    args.task_map = getattr(args, "task_map", None) or []
    args.reports = getattr(args, "reports", "reports")
    try:
        args.limit = parse_limit(args.limit)
        for d in args.include_path:
            if not os.path.isdir(d):
                raise ConfigError("--include-path", d, "no such folder")
        cfg = load(args.config, include_paths=args.include_path, task_map=parse_task_map(args.task_map))
        the_plan = plan(cfg, args)
    except ConfigError as e:
        return refuse("eval", f"invalid {_what(e)}: {e}")
    except ModelNotPresent as e:
        return refuse("eval", e)
    for w in cfg.warnings:
        print(f"warning: {w}", file=sys.stderr)
    for n in cfg.notes:
        print(f"note: {n}", file=sys.stderr)
    if args.dry_run:
        print(json.dumps(the_plan, indent=2))
        return 0
    if cfg.device is not None:
        from harness.util import devices

        try:
            devices.check_available(cfg.device)
        except devices.DeviceError as e:
            return refuse("eval", f"{cfg.path}: harness.device: {e}")
    from harness.lmeval.evaluate import resolve_scheme
    from harness.util.report import ReportRootError, check_root

    if the_plan["model_dir"]:
        try:  # the checkpoint's own scheme (harness.checkpoints reads it): refused before any report or load
            resolve_scheme(cfg, args.scheme, the_plan["model_dir"], args.record_only)
        except ConfigError as e:
            return refuse("eval", f"invalid config: {e}")
    try:
        check_root(args.reports, "--reports")
    except ReportRootError as e:
        return refuse("eval", e)
    if not cfg.task_names or any(n not in _bundled() for n in cfg.task_names):
        # lm-eval reads the data of registry tasks from the user's caches, offline (harness.util.offline)
        os.environ["HARNESS_USER_HF_DATA"] = "1"
    # The hub/datasets cache belongs with the reports the user chose, not ./reports.
    os.environ.setdefault("HARNESS_CACHE_DIR", os.path.join(os.path.abspath(args.reports), ".cache"))
    return _run(cfg, args, the_plan)


def _bundled():
    from harness.lmeval import task_names

    return task_names.bundled()


def _run(cfg, args, the_plan) -> int:
    from harness.lmeval.evaluate import Session, run_config
    from harness.lmeval.report import summary_markdown, write_lm_eval_report

    state = {"result": None}

    def summary(results, meta):
        r = state["result"]
        if r is None:
            from harness.util.report import summary_markdown as generic

            return generic(title, results, meta)
        return summary_markdown(title, [r], meta=meta, plan=r.get("details", {}).get("plan"))

    title = f"moe-harness eval {cfg.path}"
    with CommandReport(args, "eval", title, meta={"config": cfg.path, "plan": the_plan}, summary=summary) as rep:
        say = rep.say
        say(f"moe-harness eval: {cfg.path} -> report {rep.path}")
        session = Session(disable_tqdm=True, progress=say)
        try:
            result = run_config(cfg, session=session, model=args.model, scheme=args.scheme, limit=args.limit,
                                progress=say, model_optional=args.model_optional, record_only=args.record_only)
        except (ConfigError, ModelNotPresent) as e:
            rep.record({"name": f"lm_eval/{cfg.path}", "passed": False, "message": f"refused: {e}"})
            state["bad_input"] = str(e)
            result = None
        if result is not None:
            state["result"] = result
            if result.get("skipped") or not result["details"].get("gates"):
                rep.record({k: v for k, v in result.items() if k != "raw"})
                if not result.get("skipped"):
                    print(f"FAIL {result['name']}: {result['message']}", flush=True)
            else:
                _print_gates(result, rep)
                for g in result["details"]["gates"]:
                    rep.record({"name": f"{g['gate']} {g['name']}", "passed": g["passed"], "skipped": g.get("skipped"),
                                "message": "" if g["passed"] else _why_line(g), "details": g["details"]})
                folder = write_lm_eval_report(rep.rd, [result], title=title)
                say(f"lm-eval results, plot and raw outputs: {folder}")
    if "bad_input" in state:
        return refuse("eval", f"invalid config: {state['bad_input']}")
    if rep.stopped is not None:
        return rep.exit_code
    result = state["result"]
    if result.get("skipped"):
        print(result["message"])
        return SKIPPED_REQUIRED if os.environ.get("HARNESS_REQUIRE_CHECKPOINT") == "1" else 0
    gated = [g for g in result["details"].get("gates", []) if not g.get("skipped")]
    verdict = "PASSED" if result["passed"] else "FAILED"
    message = result["message"] if gated or not result["passed"] else "every gate recorded, none gated"
    print(f"{verdict if gated or not result['passed'] else 'RECORDED'}: {message}  (report: {rep.path}/summary.md)",
          flush=True)
    return rep.exit_code


def _print_gates(result, rep) -> None:
    """One line per gate: the verdict, the gate as planned, the measurement
    (failures also under --quiet; every number is in results.json)."""
    from harness.lmeval.report import measured

    for g in result["details"]["gates"]:
        status = "rec " if g.get("skipped") else ("PASS" if g["passed"] else "FAIL")
        line = f"{status} {g['details'].get('plan', g['name'])} -- measured {measured(g)}"
        if status == "FAIL" or not rep.quiet:
            print(line, flush=True)


def _why_line(g) -> str:
    d = g["details"]
    return d.get("note") or d.get("plan") or g["name"]


