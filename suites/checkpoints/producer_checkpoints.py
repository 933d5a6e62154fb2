"""Producer checkpoints of the bundled tiny MoE, made once per test process
and cached on disk ($MOE_HARNESS_CACHE_DIR, harness/checkpoints/cache.py).
`made(producer, scheme)` gives the checkpoint folder; a producer that is not
installed skips the calling test with the reason, one that fails to make its
checkpoint fails it."""
import pytest

from harness.checkpoints import producers
from harness.checkpoints.make import MakeFailed, ProducerUnavailable, make_checkpoint

CASES = [(p, s) for p, row in producers.PRODUCERS.items() for s in row.schemes]
IDS = [f"{p}-{s}" for p, s in CASES]

_made: dict = {}


def made(producer: str, scheme: str):
    key = (producer, scheme)
    if key not in _made:
        try:
            _made[key] = ("ok", make_checkpoint(producer, scheme))
        except ProducerUnavailable as e:
            _made[key] = ("skip", str(e))
        except MakeFailed as e:
            _made[key] = ("fail", str(e))
    kind, v = _made[key]
    if kind == "skip":
        pytest.skip(v)
    if kind == "fail":
        pytest.fail(v)
    return v
