"""`moe-harness bench eval`: wall time of the tiny-model eval for one scheme
(load + calibration + quantization + lm-eval on all three tasks). JSON to
stdout and to reports/<timestamp>-bench-eval/bench_eval.json."""

from __future__ import annotations

import argparse
import json
import platform
import time

from harness.lmeval.schemes import SCHEMES
from harness.lmeval.schemes import QUANTIZED_SCHEMES
from harness.lmeval.adapter import MoEEmuLM
from harness.lmeval.config import AccuracyConfig, MetricSpec, TaskSpec
from harness.lmeval.evaluate import _simple_evaluate
from harness.lmeval.tasks import TINY_TASKS
from harness.commands.convention import report_dir

DEFAULT_SCHEME = QUANTIZED_SCHEMES[0]  # the first quantized scheme of the table (nvfp4)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheme", default=DEFAULT_SCHEME, choices=SCHEMES)
    parser.add_argument("--limit", type=int, default=0, help="items per task (default 0 = all 600)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)


def run(scheme: str = DEFAULT_SCHEME, limit: int | None = None, batch_size: int = 64, threads: int = 2) -> dict:
    t0 = time.perf_counter()
    import torch


    t_import = time.perf_counter() - t0
    t = time.perf_counter()
    lm = MoEEmuLM(pretrained="tiny-moe", scheme=scheme, batch_size=batch_size, threads=threads)
    t_load = time.perf_counter() - t
    cfg = AccuracyConfig(path="<bench>", model_name="tiny-moe",
                         tasks=[TaskSpec(n, [MetricSpec("acc,none", None)]) for n in TINY_TASKS], num_fewshot=0)
    t = time.perf_counter()
    out = _simple_evaluate(lm, cfg, limit, disable_tqdm=True)
    t_eval = time.perf_counter() - t
    wall = time.perf_counter() - t0
    n_items = sum(v.get("sample_len", 0) for v in out["results"].values())
    metrics = {task: {k: v for k, v in res.items() if k.endswith(",none") and "stderr" not in k}
               for task, res in out["results"].items()}
    return {
        "bench": "eval", "scheme": scheme, "limit": limit, "tasks": list(TINY_TASKS), "items": n_items,
        "wall_s": round(wall, 2), "import_s": round(t_import, 2), "load_quantize_s": round(t_load, 2),
        "eval_s": round(t_eval, 2), "items_per_s": round(n_items / t_eval, 1) if t_eval else None,
        "target_s": 60, "within_target": wall <= 60, "device": str(lm.device),
        "torch_threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
        "metrics": metrics, "model": lm.describe(),
    }


def main(args) -> int:
    result = run(args.scheme, args.limit or None, args.batch_size, args.threads)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    report_dir(args, "bench-eval").write_json("bench_eval.json", result)
    return 0
