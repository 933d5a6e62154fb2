"""Checkpoint tensors of a layer -> the kernel format of each backend branch,
and per-scheme x backend weight creation.

Rules (each an upstream bug class):
- the device comes from the tensors passed in (w13.device), never from a layer
  attribute (a FusedMoE layer has no `.weight`);
- every lookup table is put on that device HERE, at conversion time, never
  during forward (no host->device copy is allowed inside CUDA graph capture);
- every scheme x backend branch creates `*_weight_scale` (an emulation branch
  once forgot, and weight post-processing crashed).
"""
from __future__ import annotations

import enum

import torch

import harness.formats as hf

from harness.moe import ops
from harness.moe.config import MoEQuantConfig
from harness.moe.schemes import NVFP4, get_scheme
from harness.kernels import fused_gemm


class MoEBackend(enum.Enum):
    EMULATION = "unfused"  # dequantize weights, torch matmul in float32
    TRITON_FUSED = "fused"  # Triton dequant + grouped GEMM (harness/kernels/fused_gemm.py)

    @classmethod
    def parse(cls, backend) -> "MoEBackend":
        if isinstance(backend, cls):
            return backend
        for b in cls:
            if backend in (b.value, b.name, b.name.lower()):
                return b
        raise ValueError(f"unknown MoE backend {backend!r}; expected one of {[b.name for b in cls]}")


def unpack_weight(w: torch.Tensor, scales: torch.Tensor, fmt: str, what: str = "weights") -> torch.Tensor:
    """Checkpoint weight [E, N, K/2] packed fp4 (low nibble first) or [E, N, K]
    one code per byte (fp6; fp8 as uint8 or its own float8 dtype) -> codes
    [E, N, K]. Codes are range-checked here, at load time, on any device (a
    one-off sync on a GPU), so the forward can skip the check."""
    spec = hf.get_format(fmt)
    k = scales.shape[-1] * spec.block_size
    w = hf.code_bytes(w, spec, what)
    if w.shape[-1] == k:
        return hf.check_codes(w, spec, what=what)
    if spec.is_fp4 and w.shape[-1] * 2 == k:
        return hf.unpack_fp4(w)
    raise ValueError(f"{fmt}: {what} last dim {w.shape[-1]} matches neither K={k} nor packed K/2")


def _per_expert(v: torch.Tensor, num_experts: int, what: str) -> torch.Tensor:
    """[E] float32 from [E], [E, 1], [E, 2] (w1/w3 pair, must agree) or a scalar
    (one value for all experts, as the checkpoint says)."""
    v = v.to(torch.float32)
    if v.dim() == 2 and v.shape[1] == 2:
        if not torch.equal(v[:, 0], v[:, 1]):
            raise ValueError(f"{what}: w1 and w3 global scales differ per expert; requantization is not supported")
        v = v[:, 0]
    v = v.reshape(-1)
    if v.numel() == 1:
        return v.expand(num_experts).clone()
    if v.numel() != num_experts:
        raise ValueError(f"{what}: expected {num_experts} per-expert values, got shape {tuple(v.shape)}")
    return v


def _two_level_scheme(scheme, who: str):
    s = get_scheme(scheme)
    if not s.two_level:
        raise ValueError(f"{who}: {s.name} is not a two-level (global scale + block scale) scheme")
    return s


def _input_gscale(decode_scale, what):
    """Decode-side input scale(s) (amax/2688, one per expert in ModelOpt) ->
    one encode-side activation global scale: 1 / max (the activation is
    shared by all experts, so one scale covers the largest)."""
    if decode_scale is None:
        return None
    return hf.global_scale_from_modelopt(decode_scale.to(torch.float32).max()).reshape(())


def convert_to_nvfp4_moe_kernel_format(layer, w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2,
                                       a13_scale, a2_scale, backend, scheme=NVFP4) -> dict:
    """ModelOpt-convention NVFP4 tensors -> {"backend", "quant_config", "kernel_weights"}.

    w13 [E, 2I, H/2] packed e2m1; w13_scale [E, 2I, H/16] E4M3; w13_scale_2 [E]
    DECODE-side weight_scale_2 = amax/2688 (inverted here to the encode-side
    per-expert gscale); a13_scale / a2_scale DECODE-side input scales.
    `scheme`: any two-level scheme row (default nvfp4).
    `layer` is accepted for signature parity and never read."""
    backend = MoEBackend.parse(backend)
    s = _two_level_scheme(scheme, "convert_to_nvfp4_moe_kernel_format")
    fmt = s.weight_fmt
    device = w13.device  # never layer.weight: a MoE layer has only w13/w2
    ops.prepare_device(device)
    num_experts = w13.shape[0]
    s13 = hf.scale_bytes(w13_scale, fmt, "w13_weight_scale").to(device)
    s2 = hf.scale_bytes(w2_scale, fmt, "w2_weight_scale").to(device)
    c13 = unpack_weight(w13.to(device), s13, fmt, "w13_weight")
    c2 = unpack_weight(w2.to(device), s2, fmt, "w2_weight")
    g13 = hf.global_scale_from_modelopt(_per_expert(w13_scale_2, num_experts, "w13_weight_scale_2")).to(device)
    g2 = hf.global_scale_from_modelopt(_per_expert(w2_scale_2, num_experts, "w2_weight_scale_2")).to(device)
    q13 = hf.QuantizedTensor(c13, s13, g13.reshape(-1, 1), fmt)
    q2 = hf.QuantizedTensor(c2, s2, g2.reshape(-1, 1), fmt)
    a1g = _input_gscale(a13_scale, "a13_scale")
    a2g = _input_gscale(a2_scale, "a2_scale")
    qc = MoEQuantConfig(s, q13, q2, g13, g2,
                        a1_gscale=None if a1g is None else a1g.to(device),
                        a2_gscale=None if a2g is None else a2g.to(device))
    return _finish(qc, backend)


def convert_to_ocp_mx_moe_kernel_format(layer, w13, w13_scale, w2, w2_scale, backend, scheme="w_mxfp4_a_mxfp4",
                                        w13_bias=None, w2_bias=None) -> dict:
    """OCP MX tensors (codes, fp4 packed or not; E8M0 scale bytes), optional
    per-expert biases w13_bias [E, 2I] / w2_bias [E, H] (float32 on the
    weights' device) -> same dict. `layer` is accepted for signature parity
    and never read."""
    backend = MoEBackend.parse(backend)
    s = get_scheme(scheme)
    device = w13.device
    ops.prepare_device(device)
    s13 = hf.scale_bytes(w13_scale, s.weight_fmt, "w13_weight_scale").to(device)
    s2 = hf.scale_bytes(w2_scale, s.weight_fmt, "w2_weight_scale").to(device)
    c13 = unpack_weight(w13.to(device), s13, s.weight_fmt, "w13_weight")
    c2 = unpack_weight(w2.to(device), s2, s.weight_fmt, "w2_weight")
    q13 = hf.QuantizedTensor(c13, s13, None, s.weight_fmt, s.scale_mode)
    q2 = hf.QuantizedTensor(c2, s2, None, s.weight_fmt, s.scale_mode)

    def bias(b):
        return None if b is None else b.to(device=device, dtype=torch.float32)

    return _finish(MoEQuantConfig(s, q13, q2, w13_bias=bias(w13_bias), w2_bias=bias(w2_bias)), backend)


def _finish(qc: MoEQuantConfig, backend: MoEBackend) -> dict:
    out = {"backend": backend, "quant_config": qc, "kernel_weights": None}
    if backend is MoEBackend.TRITON_FUSED:
        out["kernel_weights"] = (fused_gemm.FusedWeights.from_quantized(qc.w13_q, qc.w13_gscale),
                                 fused_gemm.FusedWeights.from_quantized(qc.w2_q, qc.w2_gscale))
    return out


def _param(layer, name, tensor):
    layer.register_parameter(name, torch.nn.Parameter(tensor, requires_grad=False))


def create_moe_weights(layer, scheme, num_experts, hidden, intermediate, backend, emulation=True, device=None):
    """Register the checkpoint-side parameters on a bare nn.Module, for every
    scheme x backend (the branches only differ after loading, in conversion):
    w13_weight [E, 2I, H(/2 fp4)] uint8, w2_weight [E, H, I(/2)], w13_weight_scale,
    w2_weight_scale (float8_e4m3fn for nvfp4, E8M0 uint8 for MX) and, nvfp4,
    w13/w2_weight_scale_2 [E] and w13/w2_input_scale [E] (decode side, ModelOpt).
    bf16: w13_weight / w2_weight in bfloat16 only."""
    s = get_scheme(scheme)
    MoEBackend.parse(backend)
    E, H, I = int(num_experts), int(hidden), int(intermediate)
    kw = dict(device=device)
    if s.weight_fmt is None:
        _param(layer, "w13_weight", torch.zeros(E, 2 * I, H, dtype=torch.bfloat16, **kw))
        _param(layer, "w2_weight", torch.zeros(E, H, I, dtype=torch.bfloat16, **kw))
        return layer
    spec = s.weight_spec
    if H % s.k_multiple or I % s.k_multiple:
        raise ValueError(f"{s.name}: hidden {H} and intermediate {I} must be multiples of {s.k_multiple}")
    per_byte = 2 if spec.is_fp4 else 1
    _param(layer, "w13_weight", torch.zeros(E, 2 * I, H // per_byte, dtype=torch.uint8, **kw))
    _param(layer, "w2_weight", torch.zeros(E, H, I // per_byte, dtype=torch.uint8, **kw))
    # weight_scale exists in EVERY branch, emulation included.
    # two-level rows store their minifloat block scale as its torch dtype (E4M3FN)
    sdt = getattr(torch, spec.scale.torch_dtype) if s.two_level else torch.uint8
    _param(layer, "w13_weight_scale", torch.zeros(E, 2 * I, H // spec.block_size, dtype=torch.uint8, **kw).view(sdt))
    _param(layer, "w2_weight_scale", torch.zeros(E, H, I // spec.block_size, dtype=torch.uint8, **kw).view(sdt))
    if s.two_level:
        for name in ("w13_weight_scale_2", "w2_weight_scale_2", "w13_input_scale", "w2_input_scale"):
            _param(layer, name, torch.ones(E, dtype=torch.float32, **kw))
    return layer


def convert_layer_weights(layer, scheme, backend) -> dict:
    """Post-process a layer built by create_moe_weights (and loaded) into the
    backend's kernel format."""
    s = get_scheme(scheme)
    if s.weight_fmt is None:
        raise ValueError("bf16 layers need no conversion")
    w = {n: p.data for n, p in layer.named_parameters()}
    if s.two_level:
        return convert_to_nvfp4_moe_kernel_format(
            layer, w["w13_weight"], w["w13_weight_scale"], w["w13_weight_scale_2"], w["w2_weight"],
            w["w2_weight_scale"], w["w2_weight_scale_2"], w.get("w13_input_scale"), w.get("w2_input_scale"), backend,
            scheme=s)
    return convert_to_ocp_mx_moe_kernel_format(layer, w["w13_weight"], w["w13_weight_scale"], w["w2_weight"],
                                               w["w2_weight_scale"], backend, scheme=s)
