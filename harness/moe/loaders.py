"""Checkpoint loaders: tensors dict -> MoEQuantConfig, one function per convention.

NVFP4 global scales come in two conventions (mixing them is a classic bug):
- ModelOpt: `*_weight_scale_2` = amax / 2688, DECODE side (small); input scales
  `*_input_scale` likewise decode side. Encode-side gscale = 1 / weight_scale_2.
- compressed-tensors: `*_weight_global_scale` = 2688 / amax, ENCODE side (large);
  `*_input_global_scale` likewise.
Weight global scales are per expert ([E]); a scalar in the checkpoint means one
scale for all experts. The activation global scale is one per layer input:
1 / max(decode-side input scales) == min(encode-side input global scales).
"""
from __future__ import annotations

import torch

import harness.formats as hf

from harness.moe.config import MoEQuantConfig
from harness.moe.conversion import (
    MoEBackend,
    _per_expert,
    _two_level_scheme,
    convert_to_nvfp4_moe_kernel_format,
    convert_to_ocp_mx_moe_kernel_format,
    unpack_weight,
)
from harness.moe.schemes import NVFP4, get_scheme
from harness.moe import ops


def _get(tensors: dict, *names):
    for n in names:
        if n in tensors:
            return tensors[n]
    raise KeyError(f"checkpoint tensor missing: one of {names}")


def load_modelopt_nvfp4(tensors: dict, scheme=NVFP4) -> MoEQuantConfig:
    """Keys: w13_weight, w13_weight_scale, w13_weight_scale_2, w2_weight,
    w2_weight_scale, w2_weight_scale_2, optional w13_input_scale, w2_input_scale.
    `scheme`: any two-level scheme row (default nvfp4)."""
    t = tensors
    out = convert_to_nvfp4_moe_kernel_format(
        None, t["w13_weight"], t["w13_weight_scale"], t["w13_weight_scale_2"], t["w2_weight"],
        t["w2_weight_scale"], t["w2_weight_scale_2"], t.get("w13_input_scale"), t.get("w2_input_scale"),
        MoEBackend.EMULATION, scheme=scheme)
    return out["quant_config"]


def load_compressed_tensors_nvfp4(tensors: dict, scheme=NVFP4) -> MoEQuantConfig:
    """Keys: w13_weight_packed (or w13_weight), w13_weight_scale,
    w13_weight_global_scale (encode side, [E] or scalar), the same for w2, and
    optional w13_input_global_scale / w2_input_global_scale (encode side).
    `scheme`: any two-level scheme row (default nvfp4)."""
    s = _two_level_scheme(scheme, "load_compressed_tensors_nvfp4")
    fmt = s.weight_fmt
    t = tensors
    w13 = _get(t, "w13_weight_packed", "w13_weight")
    w2 = _get(t, "w2_weight_packed", "w2_weight")
    device = w13.device
    E = w13.shape[0]
    s13 = hf.scale_bytes(t["w13_weight_scale"], fmt, "w13_weight_scale").to(device)
    s2 = hf.scale_bytes(t["w2_weight_scale"], fmt, "w2_weight_scale").to(device)
    g13 = hf.global_scale_from_compressed_tensors(_per_expert(t["w13_weight_global_scale"], E, "w13")).to(device)
    g2 = hf.global_scale_from_compressed_tensors(_per_expert(t["w2_weight_global_scale"], E, "w2")).to(device)
    q13 = hf.QuantizedTensor(unpack_weight(w13, s13, fmt, "w13_weight"), s13, g13.reshape(-1, 1), fmt)
    q2 = hf.QuantizedTensor(unpack_weight(w2, s2, fmt, "w2_weight"), s2, g2.reshape(-1, 1), fmt)

    def act(name):
        v = t.get(name)
        return None if v is None else hf.global_scale_from_compressed_tensors(v.to(torch.float32).min()).reshape(()).to(device)


    ops.prepare_device(device)
    return MoEQuantConfig(s, q13, q2, g13, g2, a1_gscale=act("w13_input_global_scale"),
                          a2_gscale=act("w2_input_global_scale"))


def load_ocp_mx(tensors: dict, scheme=None) -> MoEQuantConfig:
    """Keys: w13_weight, w13_weight_scale (E8M0 bytes), w2_weight, w2_weight_scale,
    optional w13_bias [E, 2I] (gate then up) and w2_bias [E, H] (float, both or
    neither: gpt-oss); the scheme from the `scheme` argument or a "scheme"
    entry (default w_mxfp4_a_mxfp4). fp4 weights may be packed (low nibble first)."""
    name = scheme if scheme is not None else tensors.get("scheme", "w_mxfp4_a_mxfp4")
    s = get_scheme(name)
    if s.two_level or s.weight_fmt is None:
        raise ValueError(f"load_ocp_mx: {s.name} is not an OCP MX scheme")
    t = tensors
    out = convert_to_ocp_mx_moe_kernel_format(None, t["w13_weight"], t["w13_weight_scale"], t["w2_weight"],
                                              t["w2_weight_scale"], MoEBackend.EMULATION, scheme=s,
                                              w13_bias=t.get("w13_bias"), w2_bias=t.get("w2_bias"))
    return out["quant_config"]


__all__ = ["load_modelopt_nvfp4", "load_compressed_tensors_nvfp4", "load_ocp_mx", "unpack_weight"]
