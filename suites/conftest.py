"""Fixtures shared by several suites (hypothesis profiles, hardware markers
and device fixtures are in the root conftest.py; markers are registered in
pyproject.toml)."""
from __future__ import annotations

import pytest

from suites.checks.problem import single_thread


@pytest.fixture
def one_thread():
    """torch intra-op threads = 1 for the test (small tensors under pytest -n 2:
    extra threads only contend). Modules opt in with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    with single_thread():
        yield
