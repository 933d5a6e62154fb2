"""Fixtures of the lm-eval suite: every test offline (`offline_hf`), one
evaluation session over the shared tiny model (`tiny_lm`, suites/conftest.py;
loading is the slow part)."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _offline(offline_hf):
    """Every test of this folder runs offline with pinned threads."""


@pytest.fixture(scope="session")
def eval_session(tiny_lm):
    """An evaluate.Session that reuses `tiny_lm` for the tiny configs (one load,
    one calibration, one quantization per scheme for the whole suite)."""
    from harness.lmeval.evaluate import Session

    session = Session(disable_tqdm=True)
    session.lms[(tiny_lm.model_dir, "float32", None, "unfused")] = tiny_lm
    return session
