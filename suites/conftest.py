"""Fixtures shared by several suites (hypothesis profiles, hardware markers
and device fixtures are in the root conftest.py; markers are registered in
pyproject.toml)."""
from __future__ import annotations

import os

import pytest

from harness.testing.checks.problem import single_thread


@pytest.fixture
def one_thread():
    """torch intra-op threads = 1 for the test (small tensors under pytest -n 2:
    extra threads only contend). Modules opt in with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    with single_thread():
        yield


@pytest.fixture(scope="session")
def offline_hf(tmp_path_factory):
    """No hub access for the rest of the session, Hugging Face caches in
    $HARNESS_CACHE_DIR or a session temp folder, torch threads pinned
    ($HARNESS_TORCH_THREADS, default 1). The lm-eval and multi-GPU suites use
    it for every test (an autouse fixture in their conftest)."""
    from harness.util.offline import enter_offline, set_threads

    enter_offline(os.environ.get("HARNESS_CACHE_DIR") or tmp_path_factory.mktemp("hf-cache"))
    set_threads(int(os.environ.get("HARNESS_TORCH_THREADS", "1")))


@pytest.fixture(scope="session")
def tiny_lm(offline_hf):
    """The bundled tiny MoE behind the lm-eval adapter (bf16 scheme, float32),
    loaded once per session; tests set the scheme they need."""
    from harness.lmeval.adapter import MoEEmuLM

    return MoEEmuLM(pretrained="tiny-moe", scheme="bf16", dtype="float32", batch_size=64)
