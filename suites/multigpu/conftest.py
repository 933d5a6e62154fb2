"""Fixtures of the multi-GPU suite (runs on CPU: device maps over CPU and meta):
every test offline, and the bundled tiny model shared with the lm-eval suite
(`offline_hf` and `tiny_lm` are in suites/conftest.py)."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _offline(offline_hf):
    """Every test of this folder runs offline with pinned threads."""


@pytest.fixture(scope="session")
def plain_lm(tiny_lm):
    """The one-device bf16 tiny model the parallel runs are compared with."""
    return tiny_lm
