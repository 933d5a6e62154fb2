"""Fixtures of the checkpoint suite: `case`, one producer checkpoint of the
bundled tiny MoE per (producer, scheme) row (producer_checkpoints.py makes and
caches them)."""
import pytest

from suites.checkpoints.producer_checkpoints import CASES, IDS, made


@pytest.fixture(params=CASES, ids=IDS)
def case(request):
    p, s = request.param
    return p, s, made(p, s)
