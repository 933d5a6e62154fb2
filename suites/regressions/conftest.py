import pytest


@pytest.fixture(autouse=True)
def _regression_one_thread(one_thread):
    """Every regression test runs its check on small tensors with one torch thread."""
    yield
