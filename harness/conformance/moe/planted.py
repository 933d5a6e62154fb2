"""Planted-bug MoE layers, one per seed bug class (/work/shared/UPSTREAM-BUGS.md):
the harness' unfused layer with the historical mistake put back. Each exists
to be failed by one check; `moe-harness conform --moe planted-...` must exit 1
naming that check and a minimal problem (suites/conformance/test_moe_planted.py).

    planted-double-qdq               the experts quantize a1 and then call the base
                                     apply, which quantizes again (vLLM #42120 -> #46254)  -> double_qdq
    planted-a1-scale                 a1_scale passed where the global scale a1_gscale
                                     belongs; None taken as 1.0 (vLLM #46254 review)      -> scale_use
    planted-weight-device            build reads layer.weight.device (vLLM #41630)        -> device
    planted-host-sync                forward guards the logits with tensor truthiness,
                                     a host sync (vLLM #46735's class)                     -> capture
    planted-dtype-skip               the activation dtype named "mxfp6", not a dispatch
                                     key, falls through to no quantization (vLLM #52704)  -> silent_skip
    planted-global-scale-reciprocal  ModelOpt's decode-side weight_scale_2 read as the
                                     encode-side global scale (vLLM #35733's class)       -> global_scale
    planted-shared-weights           build moves the block scales out of the tensors it
                                     is given (the emulation experts constructor)          -> shared_weights
    planted-ties-away                activation QDQ rounds exact ties away from zero
                                     (AMD Quark's Triton E2M1 kernel)                      -> ties
"""
from __future__ import annotations

import torch

import harness.moe as hm
import harness.moe.quantize_input as qi
from harness.moe.schemes import SCHEMES

from harness.conformance.moe.layers import build_unfused, make_layer, quant_config
from harness.conformance.moe.protocol import MoEImplementation
from harness.testing.checks.double_qdq import record_act_qdq

_MODELOPT = {"global_scale": "decode", "packing": "packed", "gate_up": "concatenated"}
_ACT_QUANTIZED = tuple(n for n, s in SCHEMES.items() if s.act_fmt is not None)
_TWO_LEVEL = tuple(n for n, s in SCHEMES.items() if s.two_level)


def _family_key(scheme) -> str:
    """The activation format named by its family ("mxfp6" for mxfp6_e3m2)."""
    return scheme.act_fmt.split("_")[0]


# Schemes whose family name is not a dispatch key (the mxfp6 rows).
_FAMILY_NOT_A_KEY = tuple(n for n, s in SCHEMES.items() if s.act_block_fmt and _family_key(s) not in qi.QUANT_DTYPES)


def _experts_cls(cfg):
    return type(hm.make_experts(cfg))


def _subclass(base, name: str, **methods):
    return type(name + base.__name__, (base,), methods)


# ---------------------------------------------------------------- double QDQ
def _build_double_qdq(weights, config):
    cfg = quant_config(weights, config)
    base = _experts_cls(cfg)

    def apply(self, hidden, topk_weights, topk_ids, *, activation="silu"):
        x = self.quantize_activation(hidden.to(torch.float32), self.a1_input_scale()).to(hidden.dtype)
        return base.apply(self, x, topk_weights, topk_ids, activation=activation)  # quantizes a1 again

    return make_layer(cfg, config, "unfused", _subclass(base, "DoubleQdq", apply=apply))


def double_qdq() -> MoEImplementation:
    return MoEImplementation(name="planted-double-qdq", version="planted", build=_build_double_qdq,
                             schemes=_ACT_QUANTIZED, conventions=_MODELOPT, observe_qdq=record_act_qdq)


# ---------------------------------------------------------------- a1_scale for a1_gscale
def _build_a1_scale(weights, config):
    cfg = quant_config(weights, config)
    base = _experts_cls(cfg)

    def a1_input_scale(self):
        return self.a1_scale if self.a1_scale is not None else torch.ones((), device=cfg.device)

    return make_layer(cfg, config, "unfused", _subclass(base, "A1Scale", a1_input_scale=a1_input_scale))


def a1_scale() -> MoEImplementation:
    return MoEImplementation(name="planted-a1-scale", version="planted", build=_build_a1_scale, schemes=_TWO_LEVEL,
                             conventions=_MODELOPT, observe_qdq=record_act_qdq)


# ---------------------------------------------------------------- layer.weight.device
def _build_weight_device(weights, config):
    device = weights.weight.device  # a FusedMoE layer has only w13 / w2: AttributeError
    return build_unfused(weights, config).to(device)


def weight_device() -> MoEImplementation:
    return MoEImplementation(name="planted-weight-device", version="planted", build=_build_weight_device,
                             conventions=_MODELOPT, observe_qdq=record_act_qdq)


# ---------------------------------------------------------------- host sync in forward
def _build_host_sync(weights, config):
    moe = build_unfused(weights, config)

    def forward(hidden, router_logits):
        if router_logits.isnan().any():  # tensor truthiness: a host sync
            raise ValueError("NaN router logits")
        return moe(hidden, router_logits)

    return forward


def host_sync() -> MoEImplementation:
    return MoEImplementation(name="planted-host-sync", version="planted", build=_build_host_sync,
                             conventions=_MODELOPT, observe_qdq=record_act_qdq)


# ---------------------------------------------------------------- dtype string skips QDQ
def _build_dtype_skip(weights, config):
    cfg = quant_config(weights, config)
    base = _experts_cls(cfg)

    def quantize_activation(self, x, scale, bf16_operand=False):  # an unfused layer: bf16_operand stays False
        key = _family_key(self.scheme)
        if key not in qi.QUANT_DTYPES:
            return x  # the fall-through to "no quantization"
        xq, _ = qi.moe_kernel_quantize_input(x, scale, key, scale_mode=self.scale_mode, bf16_operand=bf16_operand)
        return xq

    return make_layer(cfg, config, "unfused", _subclass(base, "DtypeSkip", quantize_activation=quantize_activation))


def dtype_skip() -> MoEImplementation:
    # No observe_qdq: the planted dispatcher is its own (the check that must see
    # the skip is the black-box silent_skip).
    return MoEImplementation(name="planted-dtype-skip", version="planted", build=_build_dtype_skip,
                             schemes=_FAMILY_NOT_A_KEY, conventions=_MODELOPT)


# ---------------------------------------------------------------- global-scale direction
def _build_reciprocal(weights, config):
    d = {k: v.data for k, v in weights.items()}
    for w in ("w13", "w2"):
        d[f"{w}_weight_global_scale"] = d.pop(f"{w}_weight_scale_2")  # decode side taken as encode side
        if f"{w}_input_scale" in d:
            d[f"{w}_input_global_scale"] = 1.0 / d.pop(f"{w}_input_scale")
    cfg = hm.load_compressed_tensors_nvfp4(d, scheme=config.scheme)
    return make_layer(cfg, config, "unfused")


def global_scale_reciprocal() -> MoEImplementation:
    return MoEImplementation(name="planted-global-scale-reciprocal", version="planted", build=_build_reciprocal,
                             schemes=_TWO_LEVEL, conventions=_MODELOPT, observe_qdq=record_act_qdq)


# ---------------------------------------------------------------- shared weights mutated
def _build_shared_weights(weights, config):
    moe = build_unfused(_Cloned(weights), config)
    weights["w13_weight_scale"].data.view(torch.uint8).zero_()  # the scales "moved" out of the shared tensor
    return moe


class _Cloned:
    """The weights' tensors copied (the layer keeps its own scales)."""

    def __init__(self, weights):
        self._d = {k: v.detach().clone() for k, v in weights.items()}

    def items(self):
        return list(self._d.items())


def shared_weights() -> MoEImplementation:
    return MoEImplementation(name="planted-shared-weights", version="planted", build=_build_shared_weights,
                             conventions=_MODELOPT, observe_qdq=record_act_qdq)


# ---------------------------------------------------------------- ties rounded away
def _build_ties_away(weights, config):
    cfg = quant_config(weights, config)
    base = _experts_cls(cfg)

    def quantize_activation(self, x, scale, bf16_operand=False):
        xq, _ = qi.moe_kernel_quantize_input(x, scale, self.quant_dtype, scale_mode=self.scale_mode, rounding="away",
                                             bf16_operand=bf16_operand)
        return xq

    return make_layer(cfg, config, "unfused", _subclass(base, "TiesAway", quantize_activation=quantize_activation))


def ties_away() -> MoEImplementation:
    return MoEImplementation(name="planted-ties-away", version="planted", build=_build_ties_away,
                             schemes=tuple(n for n, s in SCHEMES.items() if s.act_block_fmt), conventions=_MODELOPT,
                             observe_qdq=record_act_qdq)
