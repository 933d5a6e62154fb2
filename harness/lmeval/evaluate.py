"""Run accuracy configs: lm-eval on the baseline and on the scheme (same loaded
model, same items), the KL measurement, and the three gates.

`Session` keeps one loaded model per model folder and caches the baseline's
lm-eval results per (tasks, limit, num_fewshot), so evaluating every scheme
of the tiny model runs the baseline once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import identify
from harness.lmeval import gate_plan, gates, tasks
from harness.lmeval.config import (FROM_CHECKPOINT, AccuracyConfig, ConfigError, ModelNotPresent,
                                   check_scheme_override, load, quantization_config, resolve_model_dir, scheme_source)
from harness.lmeval.checkpoint_config import resolve_or_result
from harness.lmeval.kl import mean_token_kl
from harness.lmeval.progress import Meter
from harness.lmeval.schemes import SCHEMES
from harness.lmeval.configs import config_paths, tiny_config_path, tiny_family_config_paths
from harness.lmeval.report import items_for, write_lm_eval_report
from harness.lmeval import adapter  # adapter.MoEEmuLM looked up per call: tests replace it
from harness.emulation import synthetic_loader
from harness.emulation.moe_swap import keep_codes_for

# Checkpoint formats a quantized model folder loads in with no float model
# (harness/emulation/synthetic_loader.py builds its experts from the codes; its FORMATS).
QUANTIZED_MODEL_FORMATS = synthetic_loader.FORMATS

@dataclass
class Session:
    lms: dict = field(default_factory=dict)          # (model_dir, dtype, device, backend) -> MoEEmuLM
    baselines: dict = field(default_factory=dict)    # key -> lm-eval output
    disable_tqdm: bool = False
    progress: object = None                          # line -> None: per-batch progress of each phase

    def lm(self, model_dir: str, cfg: AccuracyConfig, scheme: str, checkpoint: str | None = None,
           oracle: bool = True):
        """The loaded model (loaded once per folder and settings), switched to
        `scheme`. `oracle`: whether the run asks for the certified oracle (the
        kl_oracle gate); a fused model loaded without it holds no unpacked
        codes (moe_swap.keep_codes_for), so it is a model of its own here."""
        keep = keep_codes_for(cfg.backend, oracle)
        key = (model_dir, cfg.dtype, cfg.device, cfg.backend, checkpoint, keep) + (("parallelize",) if cfg.parallelize else ())
        if key not in self.lms:
            calib = cfg.calibration or {}
            kwargs = dict(pretrained=model_dir, scheme=scheme, backend=cfg.backend, oracle=keep,
                          device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size)
            if cfg.parallelize:
                kwargs["parallelize"] = True
            if checkpoint is not None:
                kwargs.update(checkpoint=checkpoint, checkpoint_format=cfg.checkpoint.format)
            if "docs" in calib:
                kwargs["calibration_docs"] = calib["docs"]
            if "seed" in calib:
                kwargs["calibration_seed"] = calib["seed"]
            self.lms[key] = adapter.MoEEmuLM(**kwargs)
        lm = self.lms[key]
        lm.set_scheme(scheme)
        return lm


def _simple_evaluate(lm, cfg: AccuracyConfig, limit, session: Session, phase: str) -> dict:
    import lm_eval

    lm.progress = Meter(phase, session.progress) if session.progress is not None else None
    try:
        return _lm_eval(lm_eval, lm, cfg, limit)
    finally:
        lm.progress = None


def _lm_eval(lm_eval, lm, cfg: AccuracyConfig, limit) -> dict:
    out = lm_eval.simple_evaluate(
        model=lm, tasks=cfg.task_names, num_fewshot=cfg.num_fewshot, limit=limit,
        task_manager=tasks.task_manager(cfg.include_paths, include_defaults=tasks.needs_registry(cfg.task_names)),
        log_samples=True, bootstrap_iters=0,
        random_seed=cfg.seed, numpy_random_seed=cfg.seed, torch_random_seed=cfg.seed,
        fewshot_random_seed=cfg.seed, verbosity="ERROR",
    )
    return out


def _metric(results: dict, task: str, metric: str):
    v = results.get("results", {}).get(task, {}).get(metric)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _per_item(out: dict, task: str, metric: str) -> dict:
    """{item key: value} of one metric; a group's items are its subtasks' (keyed (subtask, doc_id))."""
    base, _, filt = metric.partition(",")
    samples = out.get("samples", {})
    subtasks = (out.get("group_subtasks") or {}).get(task) or []
    names = [task] if task in samples or not subtasks else subtasks
    items = {}
    for name in names:
        for s in samples.get(name, []):
            if filt and s.get("filter", "none") != filt:
                continue
            v = s.get(base)
            if isinstance(v, (int, float)) or (hasattr(v, "item") and getattr(v, "ndim", 1) == 0):
                items[int(s["doc_id"]) if name == task else (name, int(s["doc_id"]))] = float(v)
    return items


def _is_binary(values) -> bool:
    return bool(values) and all(v in (0.0, 1.0) for v in values)


def _n_items(out: dict, task: str) -> int | None:
    """Items lm-eval scored for a task (a group: the sum over its subtasks)."""
    counts = out.get("n-samples") or {}
    names = [task] if task in counts else (out.get("group_subtasks") or {}).get(task) or []
    n = [int((counts.get(t) or {}).get("effective") or 0) for t in names]
    return sum(n) if n else None


def _rolling_texts(cfg: AccuracyConfig, limit) -> list[str]:
    """The KL task's documents, as lm-eval renders them (doc_to_target), first `limit`."""
    from lm_eval.tasks import get_task_dict

    tm = tasks.task_manager(cfg.include_paths, include_defaults=tasks.needs_registry([cfg.kl.task]))
    task = get_task_dict([cfg.kl.task], tm)[cfg.kl.task]
    docs = list(task.test_docs() if task.has_test_docs() else task.validation_docs())
    n = cfg.kl.docs or items_for(limit, len(docs))
    return [task.doc_to_target(d) for d in docs[:n]]


def _items_line(name: str, what: str, out: dict, seconds: float) -> str:
    """'name: what task done/total, ... items, rate' from lm-eval's n-samples (effective of original)."""
    counts = {task: (n.get("effective") or 0, n.get("original")) for task, n in (out.get("n-samples") or {}).items()}
    done = sum(d for d, _ in counts.values())
    tasks = ", ".join(f"{task} {d}/{t}" for task, (d, t) in counts.items()) or "no tasks"
    rate = f", {done / seconds:.1f} items/s" if done and seconds > 0 else ""
    return f"      {name}: {what} {tasks} items{rate} in {seconds:.1f}s"


def run_config(cfg: AccuracyConfig, *, session: Session | None = None, model: str | None = None,
               scheme: str | None = None, limit: int | float | None = None, progress=None,
               model_optional: bool = False, record_only: bool = False) -> dict:
    """One config -> a result dict {name, passed, skipped, message, details, time, raw}.
    `progress(line)`, if given, hears one line per batch and per finished phase.
    Input problems found before the model loads (a float model with no scheme,
    --scheme against another scheme's thresholds, a checkpoint of another
    scheme, an absent model not marked optional) raise ConfigError /
    ModelNotPresent; the gates evaluated are gate_plan.plan_gates(...), the
    list the dry run prints."""
    say = progress or (lambda line: None)
    t0 = time.perf_counter()
    session = session or Session(progress=progress)
    limit = limit if limit is not None else cfg.limit
    try:
        model_dir = resolve_model_dir(cfg, model, optional=model_optional)
    except ModelNotPresent as e:
        if not e.optional:
            raise
        return {"name": _name(cfg, scheme), "passed": True, "skipped": True, "message": f"SKIPPED: {e}",
                "details": {"scheme": scheme or cfg.scheme}, "time": 0.0, "raw": {}}
    scheme, source, quantized = resolve_scheme(cfg, scheme, model_dir, record_only)
    name = _name(cfg, scheme)
    checkpoint = None
    if cfg.checkpoint is not None:
        checkpoint, early = resolve_or_result(cfg, name, scheme)
        if early is not None:
            return early
    specs = gate_plan.plan_gates(cfg, scheme, baseline=not quantized, record_only=record_only)
    timings = {}
    # codes are kept exactly when the fused layers need them for the planned kl_oracle gate
    lm = session.lm(model_dir, cfg, scheme if quantized else cfg.baseline_scheme, checkpoint,
                    oracle=any(s.gate == "kl_oracle" for s in specs))
    base_out = None
    t = time.perf_counter()
    if not quantized:
        bkey = (model_dir, cfg.baseline_scheme, tuple(cfg.task_names), limit, cfg.num_fewshot, cfg.seed,
                tuple(cfg.include_paths))
        if bkey not in session.baselines:
            session.baselines[bkey] = _simple_evaluate(lm, cfg, limit, session, f"{name}: baseline {cfg.baseline_scheme}")
            say(_items_line(name, f"baseline {cfg.baseline_scheme}", session.baselines[bkey], time.perf_counter() - t))
        base_out = session.baselines[bkey]
    timings["baseline_s"] = time.perf_counter() - t
    t = time.perf_counter()
    if scheme == cfg.baseline_scheme and base_out is not None:
        scheme_out = base_out
    else:
        lm.set_scheme(scheme)
        scheme_out = _simple_evaluate(lm, cfg, limit, session, f"{name}: {scheme}")
        say(_items_line(name, scheme, scheme_out, time.perf_counter() - t))
    timings["scheme_s"] = time.perf_counter() - t

    metrics = {}
    for tspec in cfg.tasks:
        for m in tspec.metrics:
            metrics[f"{tspec.name}:{m.name}"] = {
                "scheme": _metric(scheme_out, tspec.name, m.name),
                "baseline": None if base_out is None else _metric(base_out, tspec.name, m.name),
                "expected": m.value, "n": _n_items(scheme_out, tspec.name)}
    kl_info = oracle_info = None
    kinds = {s.gate for s in specs}
    if kinds & {"kl", "kl_oracle"}:
        texts = _rolling_texts(cfg, limit)
        bd = max(8, cfg.batch_size)
    if "kl" in kinds:
        t = time.perf_counter()
        kl_info = mean_token_kl(lm, texts, cfg.baseline_scheme, scheme, batch_docs=bd,
                                disable_tqdm=session.disable_tqdm)
        timings["kl_s"] = time.perf_counter() - t
        say(f"      {name}: KL on {cfg.kl.task} {len(texts)} docs, {kl_info.get('n_tokens')} tokens "
            f"in {timings['kl_s']:.1f}s")
    if "kl_oracle" in kinds:
        t = time.perf_counter()
        oracle = "oracle:" + scheme
        lm.set_scheme(oracle)
        lm.swapper.oracle_stats(oracle, reset=True)
        oracle_info = mean_token_kl(lm, texts, oracle, scheme, batch_docs=bd, disable_tqdm=session.disable_tqdm)
        oracle_info["certification"] = lm.swapper.oracle_stats(oracle, reset=True)
        timings["kl_oracle_s"] = time.perf_counter() - t
        say(f"      {name}: KL vs the float64 reference of {scheme} in {timings['kl_oracle_s']:.1f}s")
    results = evaluate_gates(specs, scheme_out, base_out, kl_info, oracle_info)
    lm.set_scheme(scheme if quantized else cfg.baseline_scheme)
    passed = all(g.passed for g in results)
    failed = [g for g in results if not g.passed]
    message = "all gates passed" if passed else "; ".join(_why(g) for g in failed)
    if quantized:
        message += (f" (model folder is a {scheme} checkpoint with no float weights: only gates that need no "
                    f"{cfg.baseline_scheme} baseline ran)")
    details = {
        "closest_gate": closest_gate(results),
        "gate_ratios": gate_ratios(results),
        "scheme": scheme, "scheme_from": source, "baseline_scheme": None if quantized else cfg.baseline_scheme,
        "model_name": cfg.model_name, "model": lm.describe(), "limit": limit, "num_fewshot": cfg.num_fewshot,
        "seed": cfg.seed, "metrics": metrics, "gates": [g.as_dict() for g in results],
        "task_map": dict(cfg.task_map),   # stand-in -> the config's task it ran for (eval --task-map)
        "plan": [s.describe() for s in specs],
        "kl": None if kl_info is None else {k: v for k, v in kl_info.items() if k != "per_doc_mean_kl"},
        "kl_oracle": None if oracle_info is None else {k: v for k, v in oracle_info.items() if k != "per_doc_mean_kl"},
        "timings": {k: round(v, 2) for k, v in timings.items()}, "config": cfg.path,
        "warnings": cfg.warnings,
    }
    return {"name": name, "passed": passed, "skipped": False, "message": message, "details": details,
            "time": round(time.perf_counter() - t0, 2),
            "raw": {"baseline": None if base_out is None else _strip(base_out), "scheme": _strip(scheme_out)}}


def _name(cfg: AccuracyConfig, scheme: str | None) -> str:
    return f"lm_eval/{Path(cfg.path).stem}" + (f"[{scheme}]" if scheme and scheme != cfg.scheme else "")


def resolve_scheme(cfg: AccuracyConfig, scheme: str | None, model_dir: str, record_only: bool = False):
    """(scheme, where it came from, whether the model folder is itself a
    quantized checkpoint). ConfigError for every refusal (one line)."""
    source = scheme_source(cfg, scheme, model_dir)
    check_scheme_override(cfg, scheme, record_only)
    wanted = scheme or cfg.scheme
    if cfg.checkpoint is not None or quantization_config(model_dir) is None:
        return wanted, source, False
    try:
        _, fmt, found = identify(model_dir)
    except CheckpointFormatError as e:
        raise ConfigError(cfg.path, "model_name", f"{model_dir} has a quantization_config the harness cannot read: "
                          f"{e}") from None
    if wanted is not None and wanted != found:
        raise ConfigError(cfg.path, source, f"{wanted}, but {model_dir} is a {fmt} checkpoint of {found}: "
                          f"drop the scheme to run the checkpoint's own, or give a float model")
    if fmt not in QUANTIZED_MODEL_FORMATS:
        raise ConfigError(cfg.path, "model_name", f"{model_dir} is a {fmt} checkpoint; a quantized folder loads as "
                          f"the model only in {', '.join(QUANTIZED_MODEL_FORMATS)}: give the float model as --model "
                          f"and this folder as harness.checkpoint (format {fmt})")
    return found, FROM_CHECKPOINT, True


def evaluate_gates(specs, scheme_out: dict, base_out: dict | None, kl_info: dict | None = None,
                   oracle_info: dict | None = None) -> list[gates.GateResult]:
    """Each planned gate (gate_plan.GateSpec) against the measurements, in plan order."""
    out = []
    for s in specs:
        if s.gate == "one_sided":
            g = gates.one_sided(s.task, s.metric, _metric(scheme_out, s.task, s.metric), s.value, s.rtol)
        elif s.gate == "paired":
            g = _paired_result(s, base_out, scheme_out)
        elif s.gate == "kl":
            g = _kl_result(s.task, "kl", kl_info, s.threshold, "vs " + s.against)
        else:
            g = _kl_result(s.task, "kl_oracle", oracle_info, s.threshold,
                           "vs float64 reference of the scheme, certified within the derived float32 tolerance "
                           "(harness.moe.tolerance)", extra={"certification": oracle_info["certification"]})
        if s.record_only and not g.skipped:
            g.passed, g.skipped = True, True
            g.details["note"] = "record only (--record-only): measured, not gated"
        g.details["plan"] = s.describe()
        out.append(g)
    return out


def _paired_result(s, base_out: dict, scheme_out: dict) -> gates.GateResult:
    b = _per_item(base_out, s.task, s.metric)
    c = _per_item(scheme_out, s.task, s.metric)
    ids = sorted(set(b) & set(c), key=str)
    base, scheme = [b[i] for i in ids], [c[i] for i in ids]
    if ids and not (_is_binary(base) and _is_binary(scheme)):
        return gates.GateResult("paired", s.name, False, {
            "allowance": s.threshold, "note": "per-item values are not 0/1: name the 0/1 metrics in "
                                              "harness.gates.paired.metrics"})
    return gates.paired(s.task, s.metric, base, scheme, allowance=s.threshold, confidence=s.confidence,
                        resamples=s.resamples, seed=s.seed, method=s.method)


def gate_ratios(results: list[gates.GateResult]) -> dict:
    """Each gate's margin as measured / threshold (it passes iff <= 1). The
    oracle gate's threshold is 0 by construction, so its margin is the largest
    error / derived tolerance of the certified blocks."""
    out = {}
    for g in results:
        if g.skipped:
            continue
        cert = g.details.get("certification")
        if cert:  # an exact-condition violation (a1 / a2 bits) has no finite margin
            exact_bad = cert.get("a1_mismatch_tokens", 0) + cert.get("a2_inconsistent_tokens", 0)
            r = math.inf if exact_bad else cert["max_err_over_tol"]
        else:
            r = g.details.get("ratio")
        out[f"{g.gate} {g.name}"] = None if r is None else round(float(r), 4)
    return out


def closest_gate(results: list[gates.GateResult]) -> str:
    """'ratio gate' of the gate nearest to failing (ratio = measured / threshold)."""
    ratios = {k: v for k, v in gate_ratios(results).items() if v is not None}
    if not ratios:
        return "no gates"
    name, r = max(ratios.items(), key=lambda kv: kv[1])
    return f"{r:.3g} {name}"


def _kl_result(task: str, gate: str, info: dict, threshold, against: str, extra: dict | None = None) -> gates.GateResult:
    if threshold is None:
        return gates.GateResult(gate, f"{task}:{gate}", True, {"mean_kl": info["mean_kl"], "threshold": None,
                                                               "against": against,
                                                               "note": "no threshold: recorded only"}, skipped=True)
    g = gates.kl_gate(task, info["mean_kl"], threshold, info["n_tokens"],
                      {"max_token_kl": info["max_token_kl"], "against": against, **(extra or {})})
    g.gate, g.name = gate, f"{task}:{gate}"
    return g


def _why(g: gates.GateResult) -> str:
    d = g.details
    if g.gate == "one_sided":
        if "bound" not in d:
            return f"{g.name}: {d.get('note')}"
        return f"{g.name} {d['measured']:.6g} {'>' if gate_plan.lower_is_better(g.name) else '<'} bound {d['bound']:.6g}"
    if g.gate == "paired":
        return (f"{g.name} paired drop {d.get('drop', math.nan):.4f} "
                f"(CI low {d.get('drop_ci_low', math.nan):.4f} > allowance {d.get('allowance')})"
                if "drop" in d else f"{g.name}: {d.get('note')}")
    return f"{g.name} KL {d.get('mean_kl', math.nan):.5f} > {d.get('threshold')}"


def _strip(out: dict) -> dict:
    """lm-eval's output without per-sample documents (kept small), JSON-ready."""
    keep = {k: v for k, v in out.items() if k not in ("samples",)}
    keep["per_item"] = {
        task: [{"doc_id": s["doc_id"], "filter": s.get("filter"),
                **{m: s[m] for m in s.get("metrics", []) if m in s},
                "resps": s.get("filtered_resps")} for s in rows]
        for task, rows in out.get("samples", {}).items()
    }
    return keep


def run_tiny_all_schemes(report_dir, limit: int | None = 200, schemes=None, session: Session | None = None,
                         write: bool = True, on_result=None, progress=None, producers: bool = False,
                         families: bool = False) -> list[dict]:
    """Every tiny-<scheme>.yaml config, one shared model and baseline (with
    `families`, then every tiny-<model_type>-<scheme>.yaml config of the tiny
    random family models, at their own limit; with `producers`, then every
    producer-<producer>-<scheme>.yaml config: the same model with its experts
    read from that producer's checkpoint); writes <report_dir>/lm_eval/ (raw
    results, summary.md, plot) after each config when `write`. Each config is
    one check: `on_result(result)` hears it the moment it finishes, so an
    interrupted run keeps the configs that finished."""
    runs = [(tiny_config_path(s), limit) for s in (schemes or SCHEMES)]
    if families:
        runs += [(p, None) for p in tiny_family_config_paths()]
    if producers:
        runs += [(p, limit) for p in config_paths()]
    session = session or Session()
    out = []
    for path, lim in runs:
        out.append(run_config(load(path), session=session, limit=lim, progress=progress))
        if write and report_dir is not None:
            write_lm_eval_report(report_dir, out, title="lm-eval: tiny-moe, every scheme"
                                 + (", tiny family models" if families else "")
                                 + (" and producer checkpoint" if producers else ""))
        if on_result is not None:
            on_result(_without_raw(out[-1]))
    return [_without_raw(r) for r in out]


def _without_raw(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "raw"}
