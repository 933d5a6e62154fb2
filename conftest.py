"""Test-suite wiring: hypothesis profiles, hardware markers (registered in
pyproject.toml), device fixtures and the deterministic Buildkite shard split.

Profiles (choose with --hypothesis-profile NAME or HARNESS_PROFILE=NAME):
    dev      default: quick local runs
    ci       hypothesis' own ci profile, deadline None; loaded when CI or
             BUILDKITE is set
    nightly  >= 2000 examples per property
"""
from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, settings

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("dev", max_examples=40, deadline=None, suppress_health_check=_SUPPRESS)
settings.register_profile(
    "ci", parent=settings.get_profile("ci"), max_examples=60, deadline=None, suppress_health_check=_SUPPRESS
)
settings.register_profile("nightly", max_examples=2000, deadline=None, suppress_health_check=_SUPPRESS)


# buildkite-test-collector's pytest plugin uploads only with a token; without
# one it should be silent, not warn at the end of every run.
if not os.environ.get("BUILDKITE_ANALYTICS_TOKEN"):
    logging.getLogger("buildkite-test-collector").setLevel(logging.ERROR)


def _default_profile() -> str:
    if os.environ.get("HARNESS_PROFILE"):
        return os.environ["HARNESS_PROFILE"]
    if os.environ.get("CI") or os.environ.get("BUILDKITE"):
        return "ci"
    return "dev"


# Loaded at import so it is in force even without the hypothesis pytest plugin's
# option; --hypothesis-profile on the command line still wins (the plugin loads it
# after conftest import).
settings.load_profile(_default_profile())


def _gpu_kind():
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None, None
    if not torch.cuda.is_available():
        return None, None
    if getattr(torch.version, "hip", None):
        arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "") or ""
        return "rocm", arch.split(":")[0]
    return "cuda", torch.cuda.get_device_name(0)


def pytest_configure(config):
    # One intra-op thread per xdist worker: `-n 2` on 2 cores with torch's
    # default thread pool oversubscribes and slows small ops several-fold.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_report_header(config):
    import torch

    try:
        import triton

        triton_v = triton.__version__
    except Exception:  # pragma: no cover - triton missing
        triton_v = "not installed"
    kind, name = _gpu_kind()
    device = f"{kind} ({name})" if kind else "cpu"
    return [
        f"moe-harness: torch {torch.__version__}, triton {triton_v}, device {device}, "
        f"hypothesis profile {settings._current_profile}"
    ]


def pytest_runtest_setup(item):
    kind, arch = _gpu_kind()
    if item.get_closest_marker("gpu") and kind is None:
        pytest.skip("needs a GPU (none visible)")
    if item.get_closest_marker("cuda") and kind != "cuda":
        pytest.skip("needs an NVIDIA CUDA GPU")
    rocm = item.get_closest_marker("rocm")
    if rocm:
        want = rocm.kwargs.get("arch") or (rocm.args[0] if rocm.args else None)
        if kind != "rocm" or (want and want != arch):
            pytest.skip(f"needs a ROCm GPU{' ' + want if want else ''}")
    cpu_only = item.get_closest_marker("cpu_only")
    if cpu_only and kind is not None:
        pytest.skip(f"CPU dry run, a GPU is visible: {cpu_only.args[0] if cpu_only.args else 'devices differ'}")
    if item.get_closest_marker("nightly") and settings._current_profile != "nightly":
        pytest.skip("nightly only (HARNESS_PROFILE=nightly)")


def pytest_collection_modifyitems(config, items):
    """Buildkite parallelism: with BUILDKITE_PARALLEL_JOB / _JOB_COUNT set, keep
    only this job's share of the collected tests: the i-th node id in sorted
    order goes to job i % count. Sorting makes the split independent of
    collection order (xdist workers, plugins), so every test runs in exactly
    one job and the jobs differ in size by at most one test."""
    job = os.environ.get("BUILDKITE_PARALLEL_JOB")
    count = os.environ.get("BUILDKITE_PARALLEL_JOB_COUNT")
    if job is None or count is None:
        return
    try:
        job_i, count_i = int(job), int(count)
    except ValueError:
        raise pytest.UsageError(f"BUILDKITE_PARALLEL_JOB={job!r} / BUILDKITE_PARALLEL_JOB_COUNT={count!r} are not integers")
    if not 0 <= job_i < count_i:
        raise pytest.UsageError(f"BUILDKITE_PARALLEL_JOB={job_i} is outside 0..{count_i - 1}")
    rank = {nodeid: i for i, nodeid in enumerate(sorted({it.nodeid for it in items}))}
    keep, drop = [], []
    for item in items:
        (keep if rank[item.nodeid] % count_i == job_i else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.fixture(scope="session")
def gpu_device():
    """The GPU torch device, or skip."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU (none visible)")
    return torch.device("cuda")


@pytest.fixture(scope="session")
def default_device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
