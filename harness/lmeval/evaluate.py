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

from harness.lmeval import gates, tasks
from harness.lmeval.config import AccuracyConfig, ModelNotPresent, load, resolve_model_dir
from harness.lmeval.checkpoint_config import resolve_or_result
from harness.lmeval.kl import mean_token_kl
from harness.lmeval.schemes import SCHEMES
from harness.lmeval.configs import config_paths, tiny_config_path, tiny_family_config_paths
from harness.lmeval.report import items_for, write_lm_eval_report
from harness.lmeval import adapter  # adapter.MoEEmuLM looked up per call: tests replace it



@dataclass
class Session:
    lms: dict = field(default_factory=dict)          # (model_dir, dtype, device, backend) -> MoEEmuLM
    baselines: dict = field(default_factory=dict)    # key -> lm-eval output
    disable_tqdm: bool = False

    def lm(self, model_dir: str, cfg: AccuracyConfig, scheme: str, checkpoint: str | None = None):
        key = (model_dir, cfg.dtype, cfg.device, cfg.backend, checkpoint) + (("parallelize",) if cfg.parallelize else ())
        if key not in self.lms:
            calib = cfg.calibration or {}
            kwargs = dict(pretrained=model_dir, scheme=cfg.baseline_scheme, backend=cfg.backend,
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


def _simple_evaluate(lm, cfg: AccuracyConfig, limit, disable_tqdm: bool) -> dict:
    import lm_eval

    out = lm_eval.simple_evaluate(
        model=lm, tasks=cfg.task_names, num_fewshot=cfg.num_fewshot, limit=limit,
        task_manager=tasks.task_manager(), log_samples=True, bootstrap_iters=0,
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


def _per_item(samples: dict, task: str, metric: str) -> dict[int, float]:
    base, _, filt = metric.partition(",")
    out = {}
    for s in samples.get(task, []):
        if filt and s.get("filter", "none") != filt:
            continue
        v = s.get(base)
        if isinstance(v, (int, float)) or (hasattr(v, "item") and getattr(v, "ndim", 1) == 0):
            out[int(s["doc_id"])] = float(v)
    return out


def _is_binary(values) -> bool:
    return bool(values) and all(v in (0.0, 1.0) for v in values)


def _paired_metrics(cfg: AccuracyConfig, base_out: dict, scheme_out: dict) -> list[tuple[str, str]]:
    if cfg.paired is None:
        return []
    if cfg.paired.metrics:
        return [tuple(m.split(":", 1)) for m in cfg.paired.metrics]
    chosen = []
    for t in cfg.tasks:
        for m in t.metrics:
            if _is_binary(list(_per_item(base_out.get("samples", {}), t.name, m.name).values())):
                chosen.append((t.name, m.name))
    return chosen


def _rolling_texts(cfg: AccuracyConfig, limit) -> list[str]:
    """The KL task's documents, as lm-eval renders them (doc_to_target), first `limit`."""
    from lm_eval.tasks import get_task_dict

    task = get_task_dict([cfg.kl.task], tasks.task_manager())[cfg.kl.task]
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
               scheme: str | None = None, limit: int | float | None = None, progress=None) -> dict:
    """One config -> a result dict {name, passed, skipped, message, details, time, raw}.
    `progress(line)`, if given, hears one line per finished phase (items done/total, rate)."""
    say = progress or (lambda line: None)
    t0 = time.perf_counter()
    session = session or Session()
    scheme = scheme or cfg.scheme or "bf16"
    limit = limit if limit is not None else cfg.limit
    name = f"lm_eval/{Path(cfg.path).stem}" + (f"[{scheme}]" if scheme != cfg.scheme else "")
    try:
        model_dir = resolve_model_dir(cfg, model)
    except ModelNotPresent as e:
        return {"name": name, "passed": True, "skipped": True, "message": f"SKIPPED: {e}",
                "details": {"scheme": scheme}, "time": 0.0, "raw": {}}
    checkpoint = None
    if cfg.checkpoint is not None:
        checkpoint, early = resolve_or_result(cfg, name, scheme)
        if early is not None:
            return early
    timings = {}
    lm = session.lm(model_dir, cfg, cfg.baseline_scheme, checkpoint)
    bkey = (model_dir, cfg.baseline_scheme, tuple(cfg.task_names), limit, cfg.num_fewshot, cfg.seed)
    t = time.perf_counter()
    if bkey not in session.baselines:
        session.baselines[bkey] = _simple_evaluate(lm, cfg, limit, session.disable_tqdm)
        say(_items_line(name, f"baseline {cfg.baseline_scheme}", session.baselines[bkey], time.perf_counter() - t))
    base_out = session.baselines[bkey]
    timings["baseline_s"] = time.perf_counter() - t
    t = time.perf_counter()
    if scheme == cfg.baseline_scheme:
        scheme_out = base_out
    else:
        lm.set_scheme(scheme)
        scheme_out = _simple_evaluate(lm, cfg, limit, session.disable_tqdm)
        say(_items_line(name, scheme, scheme_out, time.perf_counter() - t))
    timings["scheme_s"] = time.perf_counter() - t

    results: list[gates.GateResult] = []
    metrics = {}
    for tspec in cfg.tasks:
        for m in tspec.metrics:
            measured = _metric(scheme_out, tspec.name, m.name)
            metrics[f"{tspec.name}:{m.name}"] = {"scheme": measured,
                                                 "baseline": _metric(base_out, tspec.name, m.name),
                                                 "expected": m.value}
            if cfg.one_sided:
                results.append(gates.one_sided(tspec.name, m.name, measured, m.value, cfg.rtol))
    for task_name, metric in _paired_metrics(cfg, base_out, scheme_out):
        b = _per_item(base_out.get("samples", {}), task_name, metric)
        s = _per_item(scheme_out.get("samples", {}), task_name, metric)
        ids = sorted(set(b) & set(s))
        p = cfg.paired
        results.append(gates.paired(task_name, metric, [b[i] for i in ids], [s[i] for i in ids],
                                    allowance=p.allowance_for(task_name, metric), confidence=p.confidence, resamples=p.resamples,
                                    seed=p.seed, method=p.method))
    kl_info = oracle_info = None
    if cfg.kl is not None:
        t = time.perf_counter()
        texts = _rolling_texts(cfg, limit)
        bd = max(8, cfg.batch_size)
        kl_info = mean_token_kl(lm, texts, cfg.baseline_scheme, scheme, batch_docs=bd,
                                disable_tqdm=session.disable_tqdm)
        timings["kl_s"] = time.perf_counter() - t
        say(f"      {name}: KL on {cfg.kl.task} {len(texts)} docs, {kl_info.get('n_tokens')} tokens "
            f"in {timings['kl_s']:.1f}s")
        results.append(_kl_result(cfg.kl.task, "kl", kl_info, cfg.kl.max, "vs " + cfg.baseline_scheme))
        if cfg.kl.oracle and scheme != cfg.baseline_scheme and scheme != "bf16":
            t = time.perf_counter()
            oracle = "oracle:" + scheme
            lm.set_scheme(oracle)
            lm.swapper.oracle_stats(oracle, reset=True)
            oracle_info = mean_token_kl(lm, texts, oracle, scheme, batch_docs=bd,
                                        disable_tqdm=session.disable_tqdm)
            oracle_info["certification"] = lm.swapper.oracle_stats(oracle, reset=True)
            timings["kl_oracle_s"] = time.perf_counter() - t
            results.append(_kl_result(cfg.kl.task, "kl_oracle", oracle_info, cfg.kl.oracle_max,
                                      f"vs float64 reference of {scheme}, certified within the derived "
                                      "float32 tolerance (harness.moe.tolerance)",
                                      extra={"certification": oracle_info["certification"]}))
    lm.set_scheme(cfg.baseline_scheme)
    passed = all(g.passed for g in results)
    failed = [g for g in results if not g.passed]
    message = "all gates passed" if passed else "; ".join(_why(g) for g in failed)
    details = {
        "closest_gate": closest_gate(results),
        "gate_ratios": gate_ratios(results),
        "scheme": scheme, "baseline_scheme": cfg.baseline_scheme, "model_name": cfg.model_name,
        "model": lm.describe(), "limit": limit, "num_fewshot": cfg.num_fewshot, "seed": cfg.seed,
        "metrics": metrics, "gates": [g.as_dict() for g in results],
        "kl": None if kl_info is None else {k: v for k, v in kl_info.items() if k != "per_doc_mean_kl"},
        "kl_oracle": None if oracle_info is None else {k: v for k, v in oracle_info.items() if k != "per_doc_mean_kl"},
        "timings": {k: round(v, 2) for k, v in timings.items()}, "config": cfg.path,
        "warnings": cfg.warnings,
    }
    return {"name": name, "passed": passed, "skipped": False, "message": message, "details": details,
            "time": round(time.perf_counter() - t0, 2),
            "raw": {"baseline": _strip(base_out), "scheme": _strip(scheme_out)}}


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
        return f"{g.name} {d.get('measured')} < bound {d.get('bound')}" if "bound" in d else f"{g.name}: {d.get('note')}"
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
