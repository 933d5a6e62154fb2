"""The architecture rows of the MoE families (harness/moe/arch.py) against the
float64 reference, per routing row of ROUTING_ROWS (a new row is a new
parametrization) and per experts backend:

* DeepSeek-V3 "noaux_tc": sigmoid scores, selection on scores + correction
  bias, group-limited top-k (groups ranked by the sum of their two best
  biased scores), weights from the unbiased scores, renormalized, times the
  routed scaling factor; "grouped_topk" (DeepSeek-V2: groups by their best
  score);
* Llama-4: top-1 sigmoid, the weight on the expert INPUT;
* gpt-oss "softmax_topk": softmax over the k selected logits;
* drawn with every row: expert biases (gpt-oss), a shared MLP in the same
  scheme (DeepSeek, Llama-4), both activations (gpt-oss's clamped SwiGLU);
* every scheme row, w_mxfp4 (W4A16) included.

The layer must select exactly the reference's experts (selection keys are
exact: the logits, or float32 fl32(score) + bias computed identically) and
lie within the derived tolerance (harness/moe/tolerance.py, every feature's
term). The fused backend runs the Triton interpreter on CPU: small sizes.
The GPU variants are in test_moe_gpu.py."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.moe.arch import FAMILIES, ROUTING_ROWS
from harness.schemes import EXPERT_BACKENDS
from harness.strategies import moe_problems
from harness.testing.checks import problem as pb
from harness.testing.checks.host_work import check_dynamo_fullgraph, check_no_host_work_in_forward, fresh_table_caches
from harness.testing.checks.oracle import check_fused_matches_unfused, check_matches_reference, check_routing
from harness.strategies import MoEProblem

ROWS = tuple(ROUTING_ROWS)
# Families with a feature beyond plain softmax/sigmoid top-k (the plain ones are
# traced in test_moe_structure.py).
FEATURED = tuple(n for n, a in FAMILIES.items()
                 if a.grouped or a.score_correction or a.router_weight_on_input or a.expert_bias
                 or a.shared_experts or a.scoring == "softmax_topk")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("routing", ROWS)
@pb.examples(1 / 2)
@given(data=st.data())
def test_routing_row_matches_reference(routing, data):
    problem = data.draw(moe_problems(routings=(routing,), max_experts=32, max_tokens=64), label="problem")
    check_matches_reference(problem)


@pytest.mark.parametrize("routing", ROWS)
@pb.examples(2)
@given(data=st.data())
def test_routing_row_selection_is_the_reference(routing, data):
    problem = data.draw(moe_problems("w_mxfp8", routings=(routing,)), label="problem")
    check_routing(problem)


@pytest.mark.parametrize("routing", ROWS)
@pb.examples(1 / 10, minimum=3)
@given(data=st.data())
def test_routing_row_fused_matches_reference(routing, data):
    problem = data.draw(moe_problems(routings=(routing,), max_experts=8, max_tokens=16, max_hidden=1, max_inter=1),
                        label="problem")
    check_fused_matches_unfused(problem)


def family_problem(family: str, scheme: str, **kw) -> MoEProblem:
    """A small problem with a family's features (harness.moe.arch.FAMILIES):
    its routing kind, activation, biases and shared MLP; sizes shrunk."""
    a = FAMILIES[family]
    E = 8
    base = dict(E=E, top_k=min(a.top_k, 4), H=64, I=32, T=7, seed=3, scoring=a.scoring, renormalize=a.renormalize,
                activation=a.activation, logits="ties", ckpt="compressed_tensors",
                n_group=4 if a.grouped else 1, topk_group=2 if a.grouped else 1,
                routed_scaling=a.routed_scaling_factor, score_correction=a.score_correction,
                weight_on_input=a.router_weight_on_input, expert_bias=0 if a.expert_bias else None,
                shared=32 if a.shared_experts else 0, act_scale=0.0 if scheme == "w_mxfp4_a_fp8" else 1.0)
    base.update(kw)
    return MoEProblem(scheme, **base)


@pytest.mark.parametrize("family", tuple(FAMILIES))
@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
def test_family_no_host_work_in_forward(family, backend, monkeypatch):
    fresh_table_caches(monkeypatch)
    p = family_problem(family, "nvfp4")
    t, _, _, moe = pb.setup(p, backend=backend)
    check_no_host_work_in_forward(p, moe, t)


@pytest.mark.parametrize("family", FEATURED)
def test_family_dynamo_fullgraph_no_graph_break(family):
    check_dynamo_fullgraph(family_problem(family, "w_mxfp4_a_mxfp4"))
