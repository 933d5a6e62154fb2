"""Run by test_data_parallel under torchrun (2 processes): lm-eval's own
simple_evaluate over the tiny tasks with moe-emu data parallel; rank 0 writes
the metrics and per-sample responses to argv[1]."""

import json
import sys

import lm_eval

from harness.lmeval.adapter import MoEEmuLM
from harness.util.offline import enter_offline
from harness.lmeval.tasks import task_manager

TASKS = ["tiny_add_mc", "tiny_add_gen"]
LIMIT = 4


def evaluate(lm):
    out = lm_eval.simple_evaluate(model=lm, tasks=TASKS, num_fewshot=0, limit=LIMIT, task_manager=task_manager(),
                                  log_samples=True, bootstrap_iters=0, random_seed=0, numpy_random_seed=0,
                                  torch_random_seed=0, fewshot_random_seed=0)
    if out is None:  # ranks other than 0
        return None
    samples = {t: sorted([s["doc_id"], s["resps"]] for s in out["samples"][t]) for t in TASKS}
    metrics = {t: {k: v for k, v in out["results"][t].items() if k.endswith(",none")} for t in TASKS}
    return {"metrics": metrics, "samples": samples}


def main(path):
    enter_offline(None)
    # batch 1: a request's float32 sums do not depend on which others share its batch (padding width)
    lm = MoEEmuLM(pretrained="tiny-moe", scheme="w_mxfp4_a_mxfp4", dtype="float32", batch_size=1, threads=1)
    result = evaluate(lm)
    if lm.rank == 0:
        result["world_size"] = lm.world_size
        with open(path, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
