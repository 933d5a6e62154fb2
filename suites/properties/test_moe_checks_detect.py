"""Every MoE property check can fail: for each check that has no regression
module of its own (suites/regressions/ covers single quantization, silent
skip, scale sensitivity, shared config, conversion, weight creation, host
work, ties, int64 offsets and checkpoint conventions), a fault is injected
into the layer with monkeypatch and the check must raise. A check whose fault
goes undetected fails here."""
import dataclasses

import pytest
import torch

import harness.moe.activations as acts
import harness.moe.experts as ex
import harness.kernels.fused_gemm as fused
import harness.moe.ops as ops
import harness.moe.routing as routing
from harness.moe import reference as ref
from harness.testing.checks import problem as pb
from harness.testing.checks.device import check_buffers_follow_weights
from harness.testing.checks.equivariance import check_expert_equivariance, check_token_equivariance
from harness.testing.checks.oracle import check_fused_matches_unfused, check_matches_reference
from harness.strategies import MoEProblem


pytestmark = pytest.mark.usefixtures("one_thread")


def _p(scheme="w_mxfp4_a_mxfp4", **kw):
    base = dict(E=6, top_k=2, H=64, I=32, T=12, seed=11, logits="grid", spread=2,
                ckpt="modelopt" if scheme == "nvfp4" else "native")
    base.update(kw)
    return MoEProblem(scheme, **base)


def _patch_route(monkeypatch, fn):
    import harness.moe.layer as layer

    monkeypatch.setattr(routing, "route_arch", fn)
    monkeypatch.setattr(layer.routing, "route_arch", fn)


def test_reference_check_catches_highest_index_tie_break(monkeypatch):
    orig = routing.route_arch

    def highest_index_wins(logits, arch, bias=None):
        E = logits.shape[1]
        w, ids = orig(logits.flip(-1), arch, None if bias is None else bias.flip(-1))
        return w, (E - 1) - ids

    _patch_route(monkeypatch, highest_index_wins)
    with pytest.raises(AssertionError, match="routing differs"):
        check_matches_reference(_p(logits="ties"))


def test_reference_check_catches_ignored_renormalize(monkeypatch):
    orig = routing.route_arch
    _patch_route(monkeypatch, lambda logits, arch, bias=None: orig(logits, arch.replace(renormalize=False), bias))
    with pytest.raises(AssertionError):
        check_matches_reference(_p(renormalize=True, logits="grid", top_k=3))


@pytest.mark.parametrize("scheme", ("nvfp4", "w_mxfp4_a_mxfp6_e2m3", "w_mxfp8"))
def test_reference_check_catches_a_0_1_percent_activation_error(scheme, monkeypatch):
    # SwiGLU with alpha 1.7 instead of 1.702: a ~0.05% change inside the activation.
    # With quantized activations most of it is absorbed by QDQ(a2) (elements move
    # only when they cross a rounding boundary), so it shows once the problem has
    # a few thousand a2 elements (T=64, I=64: 8192); at T=12, I=32 it does not.
    monkeypatch.setitem(acts.ACTIVATIONS, "swiglu_clamp", lambda h: acts.swiglu_clamp(h, alpha=1.7))
    with pytest.raises(AssertionError, match="outside tolerance"):
        check_matches_reference(_p(scheme, activation="swiglu_clamp", T=64, I=64))


def test_reference_check_catches_gate_up_swap(monkeypatch):
    def swapped(h):
        I = h.shape[-1] // 2
        return acts.silu_and_mul(torch.cat([h[..., I:], h[..., :I]], dim=-1))

    monkeypatch.setitem(acts.ACTIVATIONS, "silu", swapped)
    with pytest.raises(AssertionError, match="outside tolerance"):
        check_matches_reference(_p())


def test_token_equivariance_catches_position_dependent_scale(monkeypatch):
    # fp8 dynamic per-tensor scale taken from the FIRST row only.
    orig = ops.e4m3_qdq_per_tensor

    def first_row_scale(x, scale):
        if scale is None and x.numel():
            scale = torch.clamp(x[:1].abs().amax(), min=2.0**-100) / 448.0
        return orig(x, scale)

    monkeypatch.setattr(ops, "e4m3_qdq_per_tensor", first_row_scale)
    with pytest.raises(AssertionError, match="token permutation"):
        check_token_equivariance(_p("w_mxfp4_a_fp8", act_scale=0.0, T=16, token_spread=12), seed=1)


def test_expert_equivariance_catches_expert_0_scale_for_all(monkeypatch):
    orig = ops.dequantize_expert_weights

    def expert0_scale(q, gscale, **kw):
        return orig(q, None if gscale is None else gscale[:1].expand_as(gscale).clone(), **kw)

    monkeypatch.setattr(ops, "dequantize_expert_weights", expert0_scale)
    with pytest.raises(AssertionError, match="expert relabelling"):
        check_expert_equivariance(_p("nvfp4", logits="distinct", spread=6, E=5, T=16), seed=3)


def test_fused_contract_catches_a_small_gemm_error(monkeypatch):
    orig = fused.moe_gemm

    def off(x, ids, fw, **kw):
        y = orig(x, ids, fw, **kw)
        return y * (1 + 2.0**-12)

    monkeypatch.setattr(fused, "moe_gemm", off)
    with pytest.raises(AssertionError, match="outside tolerance"):
        check_fused_matches_unfused(_p(E=3, T=6, H=32, I=32))


def test_placement_check_catches_a_buffer_on_another_device(monkeypatch):
    orig_init = ex.ExpertsBase.__init__

    def init_with_stray_buffer(self, quant_config, **kw):
        orig_init(self, quant_config, **kw)
        self.register_buffer("lut", torch.zeros(16, device="meta"))

    monkeypatch.setattr(ex.ExpertsBase, "__init__", init_with_stray_buffer)
    _, _, _, moe = pb.setup(_p())
    with pytest.raises(AssertionError, match="device"):
        check_buffers_follow_weights(moe)


def test_checkpoint_check_is_not_vacuous():
    # The truth and the loaded config really are compared: a perturbed truth fails.
    p = _p("nvfp4")
    t = p.tensors()
    truth = pb.truth_of(p, t)
    bad = dataclasses.replace(truth, w13_gscale=truth.w13_gscale * 1.001)
    cfg_bad = pb.load_config(p, t, bad)
    want = ref.dequant_weight(truth.w13_q, truth.w13_gscale, "nvfp4", "w13")
    got = ref.dequant_weight(cfg_bad.w13_q, cfg_bad.w13_gscale, "nvfp4", "w13")
    assert not bool(((got - want).abs() <= 4 * pb.U * want.abs()).all())
