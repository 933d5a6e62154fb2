"""Buildkite parallelism: conftest.py's split keeps every collected test in exactly one of N jobs.

Runs `pytest --collect-only` in subprocesses, the way each parallel job does,
with BUILDKITE_PARALLEL_JOB / BUILDKITE_PARALLEL_JOB_COUNT set.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).parent / "fixtures" / "sharding"
JOBS = 3


def _start(job=None, count=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDKITE_PARALLEL_JOB")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if job is not None:
        env.update(BUILDKITE_PARALLEL_JOB=str(job), BUILDKITE_PARALLEL_JOB_COUNT=str(count))
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
           "-o", "python_files=shard_case_*.py", str(CASES)]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _ids(proc) -> list[str]:
    out = proc.communicate(timeout=600)[0]  # a hang guard, not a speed check
    assert proc.returncode == 0, out
    return [line.strip() for line in out.splitlines() if "::" in line]


@pytest.mark.slow
def test_shards_cover_every_test_exactly_once():
    procs = [_start()] + [_start(j, JOBS) for j in range(JOBS)]  # all at once: one interpreter start of wall time
    everything, *shards = [_ids(p) for p in procs]
    assert len(everything) == 13
    flat = [t for shard in shards for t in shard]
    assert sorted(flat) == sorted(everything)  # each test once: none lost, none twice
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1, sizes
    # Deterministic: job j holds the tests at sorted positions j, j+N, ...
    ranked = sorted(everything)
    for j, shard in enumerate(shards):
        assert sorted(shard) == ranked[j::JOBS]
