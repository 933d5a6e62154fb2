"""The MoE protocol and its plumbing: validation of what an implementation
declares, the weights handed to build (vLLM names, packing, gate/up order,
global-scale conventions), round-robin cells, deterministic shrinking, a
missing hook reported "not provided", and the checks without a planted
shipped layer (equivariance, offsets) shown failing on test-local layers."""
import dataclasses
import re
from importlib import metadata
from pathlib import Path

import pytest
import torch

import harness.formats as hf
from harness.conformance.moe import MoEImplementation, MoEWeights, check_moe, run_moe_conformance
from harness.conformance.moe import problems as pb
from harness.conformance.moe import registry
from harness.conformance.moe.layers import build_unfused, harness_unfused
from harness.conformance.moe.runner import cells_for
from harness.conformance.moe.shrink import shrink
from harness.moe.schemes import SCHEME_NAMES

pytestmark = pytest.mark.usefixtures("one_thread")


def test_declarations_are_validated():
    with pytest.raises(ValueError, match="conventions.gate_up 'zigzag'"):
        MoEImplementation(name="x", build=build_unfused, conventions={"gate_up": "zigzag"})
    with pytest.raises(ValueError, match="unknown MoE scheme 'nvfp5'"):
        MoEImplementation(name="x", build=build_unfused, schemes=("nvfp5",))
    with pytest.raises(ValueError, match="unknown routings"):
        MoEImplementation(name="x", build=build_unfused, routings=("topk",))
    with pytest.raises(ValueError, match="gemm_precision"):
        MoEImplementation(name="x", build=build_unfused, gemm_precision="tf32")


def test_weights_in_each_convention():
    p = pb.make_problem("nvfp4", "random", "softmax_renorm", "silu", "float32", 0, E=3, H=32, I=32, T=2)
    inst = pb.materialize(p, {"global_scale": "decode", "packing": "packed", "gate_up": "interleaved"})
    w, tr = inst.weights, inst.truth
    assert w["w13_weight"].shape == (3, 64, 16) and w["w13_weight"].dtype == torch.uint8
    codes = hf.unpack_fp4(w["w13_weight"])
    assert torch.equal(codes[:, 0::2], tr.w13_q.codes[:, :32]) and torch.equal(codes[:, 1::2], tr.w13_q.codes[:, 32:])
    s = w["w13_weight_scale"]
    assert s.dtype == torch.float8_e4m3fn and torch.equal(s.view(torch.uint8)[:, 1::2], tr.w13_q.scales[:, 32:])
    assert torch.equal(1.0 / w["w13_weight_scale_2"], tr.w13_gscale)  # powers of two: exact both ways
    assert float(1.0 / w["w13_input_scale"].max()) == float(tr.a1_gscale)
    inst = pb.materialize(p, {"global_scale": "encode", "packing": "unpacked", "gate_up": "concatenated"})
    w = inst.weights
    assert torch.equal(w["w13_weight"], tr.w13_q.codes) and "w13_weight_scale_2" not in w
    assert torch.equal(w["w13_weight_global_scale"], tr.w13_gscale)
    assert float(w["w13_input_global_scale"].min()) == float(tr.a1_gscale)
    layer = MoEWeights(w)
    with pytest.raises(AttributeError, match="no attribute 'weight' \\(its parameters: w13_weight"):
        layer.weight.device
    assert layer["w2_weight"] is layer.w2_weight and "w13_input_global_scale" in layer


def test_round_robin_cells():
    impl = harness_unfused()
    cells = cells_for(impl)
    assert len(cells) == 4 * len(SCHEME_NAMES)
    per_scheme = [c[1:] for c in cells if c[0] == "nvfp4"]
    assert {c[0] for c in per_scheme} == set(impl.routings) and {c[1] for c in per_scheme} == set(impl.activations)
    assert len(cells_for(impl, full=True)) == 16 * len(SCHEME_NAMES)


def test_shrink_is_deterministic_and_minimal():
    p = pb.make_problem("w_mxfp8", "random", "softmax", "silu", "float32", 3)

    def fails(q):
        return q.E >= 3 and q.T >= 2
    a, b = shrink(p, fails, 32), shrink(p, fails, 32)
    assert a == b
    assert a[0].size() == (2, 3, 1, 32, 32)


def test_missing_hook_is_not_provided():
    impl = dataclasses.replace(harness_unfused(), observe_qdq=None, routings=("softmax",), activations=("silu",),
                               dtypes=("float32",))
    data = run_moe_conformance([impl], schemes=["nvfp4"], checks=["double_qdq"])
    (r,) = data["results"]
    assert r["status"] == "not provided" and "observe_qdq" in r["message"] and not data["failed"]


def _position_dependent(weights, config):
    moe = build_unfused(weights, config)

    def forward(hidden, router_logits):
        out = moe(hidden, router_logits)
        ramp = 1 + torch.arange(out.shape[0], dtype=out.dtype).unsqueeze(1) * 2.0**-6
        return out * ramp  # token t scaled by 1 + t/64: the token order leaks into the result

    return forward


def _wrapped_offsets(device):
    raise AssertionError("expert 2 read at a wrapped int32 offset")


def test_equivariance_oracle_and_offsets_fail_on_broken_layers():
    impl = MoEImplementation(name="broken", build=_position_dependent, schemes=("w_mxfp8",), routings=("softmax",),
                             activations=("silu",), dtypes=("float32",), probe_large_offsets=_wrapped_offsets)
    data = run_moe_conformance([impl], checks=["oracle", "equivariance", "offsets"])
    st = {r["check"]: r for r in data["results"]}
    ev = st["oracle"]["evidence"]  # token 0 is right: the worst element is a later token's
    assert st["oracle"]["status"] == "fail" and ev["index"][0] >= 1 and st["oracle"]["minimal_size"]["T"] == 2
    assert abs(ev["got"] - ev["expected"]) > ev["tolerance"] > 0
    assert st["equivariance"]["status"] == "fail" and "token permutation" in st["equivariance"]["message"]
    # one token cannot be out of order; a seeded permutation of two can be the identity
    assert st["equivariance"]["minimal_size"]["T"] in (2, 3)
    assert st["offsets"]["status"] == "fail" and "wrapped int32 offset" in st["offsets"]["message"]


def test_entry_points_are_the_shipped_list(monkeypatch):
    """pyproject's moe_harness.moe_implementations entry points name exactly
    the shipped implementations; an entry point is found by name."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "pyproject.toml").read_text()
    section = text.split(f'[project.entry-points."{registry.GROUP}"]\n', 1)[1].split("\n\n", 1)[0]
    eps = dict(re.findall(r'^([\w-]+) = "([^"]+)"$', section, re.M))
    assert eps == registry.SHIPPED
    ep = metadata.EntryPoint("my-moe", "harness.conformance.moe.layers:harness_unfused", registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {"my-moe": ep})
    assert registry.get_moe_implementation("my-moe").name == "harness-unfused"
    assert "my-moe" in registry.available_names()


def test_fixture_skips_an_implementation_that_cannot_run_here(moe_conformance):
    impl = dataclasses.replace(harness_unfused(), devices=("rocm-only",))
    with pytest.raises(pytest.skip.Exception, match="does not run on cpu"):
        moe_conformance.check(impl)
    with pytest.raises(AssertionError, match="not run: harness-unfused: does not run on cpu"):
        check_moe(impl)
