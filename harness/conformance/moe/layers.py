"""The harness' own MoE layer (harness.moe) as MoE implementations: the weights
go through the harness' checkpoint loaders (ModelOpt names for the unfused
layer, compressed-tensors names for the fused one, so both two-level
conventions are exercised), then FusedMoE over the unfused (torch GEMMs over
dequantized weights) or fused (Triton dequant + GEMM; the Triton interpreter
on CPU) experts.

Hooks: observe_qdq records every call of the activation dispatcher
harness.moe.quantize_input.moe_kernel_quantize_input (the experts look it
up at call time); the fused layer's probe_large_offsets runs its grouped
GEMM with expert weights past 2^31 bytes
(harness.testing.checks.offsets.check_fused_large_offsets)."""
from __future__ import annotations

import dataclasses

import harness.moe as hm
from harness.moe.schemes import SCHEME_NAMES, get_scheme
from harness.testing.checks.double_qdq import record_act_qdq
from harness.testing.checks.offsets import check_fused_large_offsets

from harness.conformance.moe.protocol import MoEImplementation


def quant_config(weights, config):
    """MoEQuantConfig from vLLM-named weights through the harness loaders."""
    scheme = get_scheme(config.scheme)
    d = {k: v.data for k, v in weights.items()}
    if scheme.two_level:
        if config.conventions["global_scale"] == "decode":
            return hm.load_modelopt_nvfp4(d, scheme=scheme)
        return hm.load_compressed_tensors_nvfp4(d, scheme=scheme)
    cfg = hm.load_ocp_mx(d, scheme=scheme)
    if scheme.act_per_tensor:  # static decode-side scales; absent = dynamic
        cfg = dataclasses.replace(cfg, a1_scale=d.get("w13_input_scale"), a2_scale=d.get("w2_input_scale"))
    return cfg


def make_layer(cfg, config, backend: str, experts_cls=None, **kw) -> hm.FusedMoE:
    experts = (experts_cls or type(hm.make_experts(cfg)))(cfg, backend=backend, **kw)
    return hm.FusedMoE(experts, top_k=config.top_k, renormalize=config.renormalize, scoring=config.scoring,
                       activation=config.activation)


def build_unfused(weights, config):
    return make_layer(quant_config(weights, config), config, "unfused")


def build_fused(weights, config):
    # float32 ("ieee") GEMMs on every device, as declared (gemm_precision float32)
    return make_layer(quant_config(weights, config), config, "fused", fused_precision="ieee")


def _offsets(device):
    return check_fused_large_offsets(device=device)


def harness_unfused() -> MoEImplementation:
    return MoEImplementation(name="harness-unfused", version="local", build=build_unfused, schemes=SCHEME_NAMES,
                             conventions={"global_scale": "decode", "packing": "packed", "gate_up": "concatenated"},
                             observe_qdq=record_act_qdq)


def harness_fused() -> MoEImplementation:
    return MoEImplementation(name="harness-fused", version="local", build=build_fused, schemes=SCHEME_NAMES,
                             conventions={"global_scale": "encode", "packing": "unpacked",
                                          "gate_up": "concatenated"},
                             observe_qdq=record_act_qdq, probe_large_offsets=_offsets,
                             # the Triton interpreter on CPU: small problems
                             max_tokens=4, max_experts=4, base_size=32)
