"""Structural properties of the emulated MoE, for every scheme.

* fused vs unfused per the fused kernel's contract (harness/kernels/error_bound.py):
  not bitwise (tl.dot sums in its own order), so both must lie within the
  derived float64-reference tolerance, the fused one widened by its c_prec
  (0 for "ieee", always on CPU; 2^-7 for lossy bf16 operands on GPU);
* two experts objects built from one config give identical outputs, and
  building them leaves the config untouched;
* equivariance: permuting tokens permutes outputs; relabelling experts
  together with the router columns leaves outputs unchanged. The latter uses
  tie-free logits (logits="distinct"): with ties, "lowest index wins" depends
  on the labels, so relabelling legitimately changes the routing;
* placement: every buffer of a built layer is on the weights' device; every
  backend branch of both kernel-format conversions runs with a minimal layer
  (only MoE attributes, no `.weight`) and leaves its outputs on w13's device;
  weight creation + post-processing runs for every scheme x backend;
* no host work in forward (CPU proxy of CUDA-graph capturability): no tensor
  truthiness / item / data-dependent shape, no tensor from host data, no
  cross-device copy, no decode table built during forward;
* torch.compile(fullgraph=True, backend="eager") traces the unfused forward
  with no graph break and equals eager bit for bit (CPU proxy of the GPU
  compile test; the fused backend runs the Triton interpreter on CPU, so it is
  compiled on the GPU only).
"""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.moe.arch import ROUTING_ROWS
from harness.moe.schemes import SCHEME_NAMES
from harness.testing.checks import problem as pb
from harness.testing.checks.device import check_buffers_follow_weights, check_conversion_every_backend, check_create_weights_every_scheme
from harness.testing.checks.equivariance import check_expert_equivariance, check_token_equivariance
from harness.testing.checks.host_work import check_dynamo_fullgraph, check_no_host_work_in_forward, fresh_table_caches
from harness.testing.checks.oracle import check_fused_matches_unfused
from harness.testing.checks.shared_config import check_shared_config
from harness.strategies import moe_problems
from harness.schemes import EXPERT_BACKENDS


pytestmark = pytest.mark.usefixtures("one_thread")

# Routing rows whose selection relabels with the experts: ungrouped (groups are
# label ranges) and without a correction bias (two biased float32 keys can tie
# even for distinct logits, and ties go to the lower label).
UNGROUPED_EXACT_KEYS = tuple(n for n, r in ROUTING_ROWS.items() if not (r.grouped or r.score_correction))


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pb.examples(1 / 15, minimum=2)
@given(data=st.data())
def test_fused_matches_unfused(scheme, data):
    problem = data.draw(moe_problems(scheme, max_experts=8, max_tokens=24, max_hidden=1, max_inter=1), label="problem")
    check_fused_matches_unfused(problem)


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pb.examples(1 / 4)
@given(data=st.data())
def test_two_experts_from_one_config(scheme, data):
    problem = data.draw(moe_problems(scheme, max_experts=16, max_tokens=64), label="problem")
    check_shared_config(problem)


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pb.examples(1 / 4)
@given(data=st.data())
def test_token_permutation_equivariance(scheme, data):
    problem = data.draw(moe_problems(scheme, max_experts=16, max_tokens=64), label="problem")
    seed = data.draw(st.integers(0, 2**16), label="perm_seed")
    check_token_equivariance(problem, seed=seed)


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pb.examples(1 / 4)
@given(data=st.data())
def test_expert_relabelling_invariance(scheme, data):
    problem = data.draw(moe_problems(scheme, max_experts=16, max_tokens=64, logits="distinct",
                                     routings=UNGROUPED_EXACT_KEYS), label="problem")
    seed = data.draw(st.integers(0, 2**16), label="perm_seed")
    check_expert_equivariance(problem, seed=seed)


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
def test_buffers_follow_weights(scheme):
    from harness.strategies import MoEProblem

    p = MoEProblem(scheme, 4, 2, 32, 32, 4, 0, ckpt="modelopt")
    _, _, _, moe = pb.setup(p)
    check_buffers_follow_weights(moe)


def test_conversion_every_backend_minimal_layer():
    check_conversion_every_backend()


def test_create_and_convert_weights_every_scheme_and_backend():
    check_create_weights_every_scheme()


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
def test_no_host_work_in_forward(scheme, backend, monkeypatch):
    from harness.strategies import MoEProblem

    fresh_table_caches(monkeypatch)  # conversion, not forward, must fill them
    p = MoEProblem(scheme, 4, 2, 32, 32, 5, 3, ckpt="compressed_tensors", logits="ties")
    t, _, cfg, moe = pb.setup(p, backend=backend)
    check_no_host_work_in_forward(p, moe, t)


def _one_scheme_per_dispatch_kind():
    """One scheme per (weight kind, activation dispatch kind) of the scheme
    table: the traced code paths differ only by these (tracing costs seconds)."""
    from harness.moe.quantize_input import QUANT_DTYPES
    from harness.moe.schemes import SCHEMES

    seen, out = set(), []
    for name in SCHEME_NAMES:
        s = SCHEMES[name]
        key = (s.two_level, QUANT_DTYPES.get(s.quant_dtype))
        if key not in seen:
            seen.add(key)
            out.append(name)
    return tuple(out)


@pytest.mark.parametrize("scheme", _one_scheme_per_dispatch_kind())
def test_dynamo_fullgraph_no_graph_break(scheme):
    from harness.strategies import MoEProblem

    p = MoEProblem(scheme, 4, 2, 32, 32, 5, 3, ckpt="compressed_tensors", logits="ties",
                   act_scale=0.0 if scheme == "w_mxfp4_a_fp8" else 1.0)
    check_dynamo_fullgraph(p)
