"""FusedMoE (router + experts) and build_emulated_moe for the lm-eval adapter."""
from __future__ import annotations

from typing import Optional

import torch

import harness.formats as hf

from harness.moe import quantize_input, routing
from harness.moe.activations import get_activation
from harness.moe.config import MoEQuantConfig
from harness.moe.experts import ExpertsBase, UnquantizedExperts, _grouped_gemm_unfused, make_experts
from harness.moe.schemes import get_scheme


class FusedMoE(torch.nn.Module):
    """forward(hidden [T, H], router_logits [T, E]) -> [T, H] (hidden's dtype).

    prepare (route; quantize a1 here only when the experts do NOT expect
    unquantized inputs) -> experts.apply -> the top-k weighted sum."""

    def __init__(self, experts: ExpertsBase, *, top_k: int, renormalize: bool = True,
                 scoring: str = "softmax", activation: str = "silu"):
        super().__init__()
        get_activation(activation)
        if scoring not in routing.SCORINGS:
            raise ValueError(f"unknown scoring {scoring!r}; expected one of {', '.join(routing.SCORINGS)}")
        self.experts = experts
        self.top_k = int(top_k)
        self.renormalize = bool(renormalize)
        self.scoring = scoring
        self.activation = activation

    @property
    def scheme(self):
        return self.experts.scheme

    @property
    def quant_config(self) -> Optional[MoEQuantConfig]:
        return self.experts.quant_config

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = routing.route(router_logits, self.top_k, scoring=self.scoring,
                                               renormalize=self.renormalize)
        x = hidden
        if not self.experts.expects_unquantized_inputs and self.experts.quant_dtype is not None:
            x, _ = quantize_input.moe_kernel_quantize_input(
                x.to(torch.float32), self.experts.a1_input_scale(), self.experts.quant_dtype,
                scale_mode=self.experts.scale_mode, backend=self.experts.op_backend)
            x = x.to(hidden.dtype)
        return self.experts.apply(x, topk_weights, topk_ids, activation=self.activation)


def _as_scalar_f32(v, device):
    if v is None:
        return None
    return torch.as_tensor(v, dtype=torch.float32).to(device).reshape(())


def quantize_expert_weights(w: torch.Tensor, scheme) -> tuple:
    """Float expert weights [E, N, K] -> (QuantizedTensor, per-expert gscale [E] or None).
    Round to nearest even; MX block scales in the scheme's scale mode; nvfp4
    per-expert encode-side global scale 2688 / amax(w[e])."""
    s = get_scheme(scheme)
    wf = w.detach().to(torch.float32)
    if wf.dim() != 3:
        raise ValueError(f"expert weights must be [E, N, K], got {tuple(wf.shape)}")
    if s.two_level:
        amax = wf.abs().amax(dim=(1, 2))
        gs = hf.nvfp4_global_scale(amax, s.weight_fmt)
        return hf.quantize(wf, s.weight_fmt, global_scale=gs.reshape(-1, 1)), gs
    return hf.quantize(wf, s.weight_fmt, scale_mode=s.scale_mode), None


def build_quant_config(scheme, w13, w2, *, a1_gscale=None, a2_gscale=None, a1_scale=None, a2_scale=None):
    s = get_scheme(scheme)
    dev = w13.device
    q13, g13 = quantize_expert_weights(w13, s)
    q2, g2 = quantize_expert_weights(w2, s)
    if not s.needs_act_gscale:
        a1_gscale = a2_gscale = None  # encode-side activation global scales are nvfp4-only
    elif a1_gscale is None or a2_gscale is None:
        raise ValueError(f"{s.name}: a1_gscale and a2_gscale (encode-side activation global scales, "
                         "448*6/amax) are required; calibrate_activation_scales() computes them")
    return MoEQuantConfig(s, q13, q2, g13, g2, a1_scale=_as_scalar_f32(a1_scale, dev),
                          a1_gscale=_as_scalar_f32(a1_gscale, dev), a2_scale=_as_scalar_f32(a2_scale, dev),
                          a2_gscale=_as_scalar_f32(a2_gscale, dev))


def build_emulated_moe(scheme, w13: torch.Tensor, w2: torch.Tensor, *, top_k: int, renormalize: bool = True,
                       scoring: str = "softmax", activation: str = "silu", a1_gscale=None, a2_gscale=None,
                       backend: str = "unfused", op_backend: str = "auto",
                       fused_precision: str = "auto", fused_mode: str = "auto") -> FusedMoE:
    """w13 [E, 2I, H] (gate then up), w2 [E, H, I], float -> FusedMoE.
    scheme "bf16": no quantization (weights kept as given, computed in float32).
    backend "unfused" (dequantize, torch.matmul in float32) or "fused" (Triton,
    harness/kernels/fused_gemm.py: fused_precision auto|ieee|bf16, fused_mode
    auto|fused|predequant); op_backend (auto|triton|torch) routes the QDQ and
    weight-dequant ops of the unfused path."""
    s = get_scheme(scheme)
    if w13.dim() != 3 or w2.dim() != 3 or w13.shape[0] != w2.shape[0] or w13.shape[1] != 2 * w2.shape[2] \
            or w13.shape[2] != w2.shape[1]:
        raise ValueError(f"need w13 [E, 2I, H] and w2 [E, H, I]; got {tuple(w13.shape)} and {tuple(w2.shape)}")
    kw = dict(backend=backend, op_backend=op_backend, fused_precision=fused_precision, fused_mode=fused_mode)
    if s.weight_fmt is None:
        experts = UnquantizedExperts(w13.detach(), w2.detach(), **kw)
    else:
        experts = make_experts(build_quant_config(s, w13, w2, a1_gscale=a1_gscale, a2_gscale=a2_gscale), **kw)
    return FusedMoE(experts, top_k=top_k, renormalize=renormalize, scoring=scoring, activation=activation)


@torch.no_grad()
def calibrate_activation_scales(w13, w2, hidden, router_logits, *, top_k, renormalize=True,
                                scoring="softmax", activation="silu", scheme=None):
    """Encode-side activation global scales (a1_gscale, a2_gscale) of a
    two-level scheme (nvfp4 when None) = gs_numerator / amax (2688 / amax for
    nvfp4) of the GEMM inputs in the UNQUANTIZED forward over the samples.
    As vLLM's calibration: one scale per layer input, max over all tokens."""
    fmt = None if scheme is None else get_scheme(scheme).act_fmt
    act = get_activation(activation)
    x = hidden.to(torch.float32)
    w, ids = routing.route(router_logits, top_k, scoring=scoring, renormalize=renormalize)
    T, H = x.shape
    xs = x.unsqueeze(1).expand(T, top_k, H).reshape(-1, H)
    a = act(_grouped_gemm_unfused(xs, ids.reshape(-1), w13.to(torch.float32)))
    a1 = hf.nvfp4_global_scale(x.abs().amax() if T else torch.zeros(()), fmt)
    a2 = hf.nvfp4_global_scale(a.abs().amax() if T else torch.zeros(()), fmt)
    return a1, a2
