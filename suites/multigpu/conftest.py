"""Fixtures of the multi-GPU suite (runs on CPU: device maps over CPU and meta)."""

import os

import pytest

from harness.lmeval.offline import enter_offline, set_threads


@pytest.fixture(scope="session", autouse=True)
def _offline(tmp_path_factory):
    enter_offline(os.environ.get("HARNESS_CACHE_DIR") or tmp_path_factory.mktemp("hf-cache"))
    set_threads(int(os.environ.get("HARNESS_TORCH_THREADS", "1")))


@pytest.fixture(scope="session")
def plain_lm():
    from harness.lmeval.adapter import MoEEmuLM

    return MoEEmuLM(pretrained="tiny-moe", scheme="bf16", dtype="float32", batch_size=64)
