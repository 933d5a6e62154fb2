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
import torch
from hypothesis import given

import harness.moe as hm
from hypothesis import strategies as st

from harness.moe.arch import FAMILIES, ROUTING_ROWS
from harness.moe.schemes import SCHEME_NAMES
from harness.schemes import EXPERT_BACKENDS
from harness.strategies import MOE_BIAS_EXPS, moe_problems
from harness.testing.checks.act_format import check_activation_format
from harness.testing.checks.bias_placement import check_bias_after_scale
from harness.testing.checks.correction_bias import check_correction_bias_for_selection_only
from harness.testing.checks.group_limit import check_group_limit
from harness.testing.checks.routed_scaling import check_routed_scaling
from harness.testing.checks.router_weight import check_router_weight_on_input
from harness.testing.checks.stages import check_stages
from harness.testing.checks import problem as pb
from harness.testing.checks.host_work import check_dynamo_fullgraph, check_no_host_work_in_forward, fresh_table_caches
from harness.testing.checks.oracle import check_fused_matches_unfused, check_matches_reference, check_routing

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


@pytest.mark.slow  # the Triton interpreter: seconds per parametrization
@pytest.mark.parametrize("routing", ROWS)
@pb.examples(1 / 10, minimum=3)
@given(data=st.data())
def test_routing_row_fused_matches_reference(routing, data):
    problem = data.draw(moe_problems(routings=(routing,), max_experts=8, max_tokens=16, max_hidden=1, max_inter=1),
                        label="problem")
    check_fused_matches_unfused(problem)


@pytest.mark.parametrize("family", FEATURED)
@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
def test_family_no_host_work_in_forward(family, backend, monkeypatch):
    fresh_table_caches(monkeypatch)
    p = pb.family_problem(family, "nvfp4", logits="ties")
    t, _, _, moe = pb.setup(p, backend=backend)
    check_no_host_work_in_forward(p, moe, t)


@pytest.mark.slow  # dynamo tracing: seconds per family
@pytest.mark.parametrize("family", FEATURED)
def test_family_dynamo_fullgraph_no_graph_break(family):
    check_dynamo_fullgraph(pb.family_problem(family, "w_mxfp4_a_mxfp4", logits="ties"))


# The bug-class checks of the features hold on every drawn problem of their rows
# (their faults are shown red in suites/regressions/test_family_*.py).
GROUPED = tuple(n for n, r in ROUTING_ROWS.items() if r.grouped)
CORRECTED = tuple(n for n, r in ROUTING_ROWS.items() if r.score_correction)
ON_INPUT = tuple(n for n, r in ROUTING_ROWS.items() if r.weight_on_input)


@pb.examples(1 / 2)
@given(data=st.data())
def test_correction_bias_is_for_selection_only(data):
    problem = data.draw(moe_problems(routings=CORRECTED, max_experts=32, max_tokens=64), label="problem")
    check_correction_bias_for_selection_only(problem)


@pb.examples(1 / 2)
@given(data=st.data())
def test_selection_stays_in_the_kept_groups(data):
    problem = data.draw(moe_problems(routings=GROUPED, max_experts=32, max_tokens=64).filter(lambda p: p.n_group > 1),
                        label="problem")
    check_group_limit(problem)


@pb.examples(1 / 4)
@given(data=st.data())
def test_routed_scaling_once_and_not_on_the_shared_experts(data):
    problem = data.draw(moe_problems(routings=GROUPED, max_experts=16, max_tokens=32), label="problem")
    check_routed_scaling(problem.replace(shared=data.draw(st.sampled_from((0, 32)), label="shared")))


@pb.examples(1 / 4)
@given(data=st.data())
def test_router_weight_on_the_input_only(data):
    problem = data.draw(moe_problems(routings=ON_INPUT, max_experts=16, max_tokens=32), label="problem")
    check_router_weight_on_input(problem)


@pb.examples(1 / 4)
@given(data=st.data())
def test_expert_biases_after_the_gemm_scale(data):
    problem = data.draw(moe_problems(max_experts=16, max_tokens=32), label="problem")
    check_bias_after_scale(problem.replace(expert_bias=data.draw(st.sampled_from(MOE_BIAS_EXPS), label="bias")))


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pb.examples(1 / 8, minimum=2)
@given(data=st.data())
def test_activations_quantized_in_the_rows_activation_format(scheme, data):
    check_activation_format(data.draw(moe_problems(scheme, max_experts=16, max_tokens=32), label="problem"))


@pb.examples(1 / 2)
@given(data=st.data())
def test_every_float32_step_within_its_term(data):
    # harness/testing/checks/stages.py: the terms of the tolerance, one step at a time
    check_stages(data.draw(moe_problems(max_experts=16, max_tokens=64), label="problem"))


@pytest.mark.parametrize("kw,field", [
    (dict(n_group=3), "n_group"),  # 8 experts in 3 groups
    (dict(n_group=4, topk_group=5), "topk_group"),
    (dict(n_group=4, topk_group=1, top_k=3), "top_k"),  # 2 experts per kept group
    (dict(router_weight_on_input=True, top_k=2), "router_weight_on_input"),
    (dict(scoring="softmax_topk", n_group=2), "softmax_topk"),
    (dict(scoring="softmax_topk", e_score_correction_bias=torch.zeros(8)), "softmax_topk"),
    (dict(e_score_correction_bias=torch.zeros(7)), "e_score_correction_bias"),
    (dict(w13_bias=torch.zeros(8, 63), w2_bias=torch.zeros(8, 32)), "w13_bias"),
    (dict(w13_bias=torch.zeros(8, 64)), "w2_bias"),
    (dict(shared_w13=torch.zeros(64, 32), shared_w2=torch.zeros(32, 16)), "shared_w13"),
    (dict(routed_scaling_factor=0.0), "routed_scaling_factor"),
    (dict(scoring="tanh"), "scoring"),
])
def test_build_refuses_a_row_that_does_not_fit(kw, field):
    g = torch.Generator().manual_seed(0)
    w13, w2 = torch.randn(8, 64, 32, generator=g), torch.randn(8, 32, 32, generator=g)
    args = {"top_k": 2, **kw}
    with pytest.raises(ValueError, match=field):
        hm.build_emulated_moe("w_mxfp4", w13, w2, **args)


def test_nvfp4_shared_mlp_needs_its_own_activation_scales():
    g = torch.Generator().manual_seed(0)
    w13, w2 = torch.randn(4, 64, 32, generator=g), torch.randn(4, 32, 32, generator=g)
    x, lg = torch.randn(5, 32, generator=g), torch.randn(5, 4, generator=g)
    sw13, sw2 = torch.randn(64, 32, generator=g), torch.randn(32, 32, generator=g)
    a1, a2, s1, s2 = hm.calibrate_activation_scales(w13, w2, x, lg, top_k=2, shared_w13=sw13, shared_w2=sw2)
    with pytest.raises(ValueError, match="shared_a1_gscale"):
        hm.build_emulated_moe("nvfp4", w13, w2, top_k=2, a1_gscale=a1, a2_gscale=a2, shared_w13=sw13, shared_w2=sw2)
    moe = hm.build_emulated_moe("nvfp4", w13, w2, top_k=2, a1_gscale=a1, a2_gscale=a2, shared_w13=sw13,
                                shared_w2=sw2, shared_a1_gscale=s1, shared_a2_gscale=s2)
    assert moe.shared_quant_config.a1_gscale is not None and not torch.equal(moe.shared_quant_config.a2_gscale, a2)
