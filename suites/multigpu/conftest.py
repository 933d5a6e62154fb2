"""Fixtures of the multi-GPU suite (runs on CPU: device maps over CPU and meta):
the lm-eval suite's offline set-up and bf16 tiny model, shared, not copied."""

import pytest

from suites.lm_eval.conftest import _offline, tiny_lm  # noqa: F401  (fixtures registered here too)


@pytest.fixture(scope="session")
def plain_lm(tiny_lm):  # noqa: F811
    return tiny_lm
