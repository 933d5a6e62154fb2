"""Shared fixtures of the lm-eval suite: offline environment, pinned threads,
one loaded tiny model per test session (loading is the slow part)."""

import os

import pytest

from harness.lmeval.offline import enter_offline, set_threads


@pytest.fixture(scope="session", autouse=True)
def _offline(tmp_path_factory):
    enter_offline(os.environ.get("HARNESS_CACHE_DIR") or tmp_path_factory.mktemp("hf-cache"))
    set_threads(int(os.environ.get("HARNESS_TORCH_THREADS", "1")))


@pytest.fixture(scope="session")
def tiny_lm():
    from harness.lmeval.adapter import MoEEmuLM

    return MoEEmuLM(pretrained="tiny-moe", scheme="bf16", dtype="float32", batch_size=64)


@pytest.fixture(scope="session")
def eval_session(tiny_lm):
    """An evaluate.Session that reuses `tiny_lm` for the tiny configs (one load,
    one calibration, one quantization per scheme for the whole suite)."""
    from harness.lmeval.evaluate import Session

    session = Session(disable_tqdm=True)
    session.lms[(tiny_lm.model_dir, "float32", None, "unfused")] = tiny_lm
    return session
