"""The harness' own MoE layers pass every bug-class check that applies, on
CPU: the unfused layer on every scheme (each with every routing,
activation and dtype, round-robin), the fused one (Triton interpreter) on
one cell."""
import dataclasses

import pytest

from harness.conformance.moe import get_moe_implementation, run_moe_conformance
from harness.conformance.moe.checks import CHECK_NAMES
from harness.moe.schemes import SCHEME_NAMES

pytestmark = pytest.mark.usefixtures("one_thread")


def _statuses(data):
    out = {}
    for r in data["results"]:
        out.setdefault(r["check"], set()).add(r["status"])
    return out


@pytest.mark.slow
def test_unfused_layer_passes_every_check_on_every_scheme():
    data = run_moe_conformance(["harness-unfused"])
    bad = [(r["check"], r["cell"], r["message"]) for r in data["results"] if r["status"] in ("fail", "error")]
    assert not bad and not data["failed"]
    assert {r["cell"]["scheme"] for r in data["results"]} == set(SCHEME_NAMES)
    st = _statuses(data)
    assert set(st) == set(CHECK_NAMES)
    assert all("pass" in st[c] for c in CHECK_NAMES if c != "offsets")
    assert st["offsets"] == {"not provided"}  # torch indexing: no offset arithmetic of its own to probe


@pytest.mark.slow
def test_fused_layer_passes_every_check():
    impl = get_moe_implementation("harness-fused")
    impl = dataclasses.replace(impl, routings=("softmax_renorm",), activations=("silu",), dtypes=("float32",))
    data = run_moe_conformance([impl], schemes=["nvfp4"])
    assert not data["failed"], [(r["check"], r["message"]) for r in data["results"] if r["status"] != "pass"]
    assert _statuses(data) == {c: {"pass"} for c in CHECK_NAMES}
