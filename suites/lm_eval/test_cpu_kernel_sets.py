"""The KL gates hold under torch's generic CPU kernels, and still catch the
faults they exist for there.

Buildkite runs every kernel set (buildkite/pipeline.yml, steps cpu-kernels-*);
here, the generic one: ATEN_CPU_CAPABILITY=default with MKL restricted to
SSE4.2 -- the float32 sums least like those of this machine's own kernels.
Kernel sets are chosen at process start, so the check runs in a subprocess
(suites/lm_eval/kernel_sets.py), which refuses to run if torch did not take
the requested kernel set.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("scheme,fault", [("w_mxfp4_a_mxfp4", "a2_qdq_skipped"),
                                          ("nvfp4", "double_qdq_second_scale_missing")])
def test_gates_hold_and_catch_under_generic_kernels(tmp_path, scheme, fault):
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", MKL_ENABLE_INSTRUCTIONS="SSE4_2",
               HARNESS_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "suites.lm_eval.kernel_sets", "--expect-capability", "default",
                           "--schemes", scheme, "--faults", fault],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    by_fault = {r["fault"]: r for r in rows}
    correct, faulty = by_fault["none"], by_fault[fault]
    assert correct["cpu_capability"] == "DEFAULT"
    assert correct["kl_pass"] and correct["oracle_pass"]
    assert correct["oracle_kl"] == 0.0 and correct["outside"] == 0 and correct["elements"] > 0
    assert not faulty["oracle_pass"] and faulty["outside"] > 0
