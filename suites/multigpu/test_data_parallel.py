"""Data parallel: lm-eval shards the requests by rank over two moe-emu
processes (torchrun + accelerate on gloo) and gathers them; the metrics and
every sample's response equal the single-process run's, bit for bit (batch
size 1 in both, so no request's padding depends on how they were sharded)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.util.offline import set_threads
from suites.multigpu import dp_eval


@pytest.mark.slow
def test_two_process_eval_identical_to_one(plain_lm, tmp_path):
    out = tmp_path / "dp.json"
    env = dict(os.environ, PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "suites.multigpu.dp_eval", str(out)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["world_size"] == 2
    plain_lm.set_scheme("w_mxfp4_a_mxfp4")  # no calibration: its amax would depend on the batch size
    batch, plain_lm.batch_size = plain_lm.batch_size, 1
    threads = set_threads(1)  # as each rank: float32 sums split over threads differ in the last bit
    try:
        want = json.loads(json.dumps(dp_eval.evaluate(plain_lm)))
    finally:
        plain_lm.batch_size = batch
        set_threads(threads)
    assert got["metrics"] == want["metrics"]
    assert got["samples"] == want["samples"]
