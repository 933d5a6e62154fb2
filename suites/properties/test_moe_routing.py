"""Routing property: harness.moe.routing.route (float32) selects the top-k of
the logits exactly like the float64 reference, equal logits going to the
lowest expert index, and its weights agree to (2E + 2k + 18) u relative.
Every routing row of harness.moe.arch.ROUTING_ROWS that takes the scoring is
drawn (groups, correction bias, routed scaling, weight on input).

Routing is cheap, so this runs many examples with the full size range; it is
the property that found torch's CPU sigmoid rounding EQUAL logits to different
float32 scores (vector body vs scalar tail), which broke "ties to the lowest
index" whenever routing sorted the rounded scores."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.strategies import moe_problems
from harness.testing.checks import problem as pb
from harness.testing.checks.oracle import check_routing


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("scoring", ("softmax", "sigmoid"))
@pb.examples(2)
@given(data=st.data())
def test_routing_matches_reference(scoring, data):
    problem = data.draw(moe_problems("w_mxfp8", scoring=scoring), label="problem")
    check_routing(problem)
