"""FusedMoE (router + experts) and build_emulated_moe for the lm-eval adapter."""
from __future__ import annotations

from typing import Optional

import torch

import harness.formats as hf

from harness.moe import quantize_input, routing
from harness.moe.activations import get_activation
from harness.moe.arch import MoEArch, make_arch
from harness.moe.config import MoEQuantConfig
from harness.moe.experts import ExpertsBase, UnquantizedExperts, _grouped_gemm_unfused, check_hidden, make_experts
from harness.moe.schemes import get_scheme


class FusedMoE(torch.nn.Module):
    """forward(hidden [T, H], router_logits [T, E]) -> [T, H] (hidden's dtype).

    route (harness.moe.routing.route_arch, the row `self.arch`) -> the routed
    experts' input: hidden, or hidden * weight when router_weight_on_input
    (quantize a1 here only when the experts do NOT expect unquantized inputs)
    -> experts.apply (top-k weighted sum in float32; weights of one when the
    weight went on the input) -> + shared_experts(hidden) (a one-expert
    experts object, weight 1) -> hidden's dtype.

    The architecture is one row, `arch` (harness.moe.arch.MoEArch), given
    whole or built from the flat keywords; the tensors a row promises
    (e_score_correction_bias [E], the experts' biases, shared_experts) must be
    there, and nothing else."""

    def __init__(self, experts: ExpertsBase, *, top_k: Optional[int] = None, renormalize: bool = True,
                 scoring: str = "softmax", activation: str = "silu", n_group: int = 1, topk_group: int = 1,
                 routed_scaling_factor: float = 1.0, e_score_correction_bias: Optional[torch.Tensor] = None,
                 router_weight_on_input: bool = False, shared_experts: Optional[ExpertsBase] = None,
                 arch: Optional[MoEArch] = None):
        super().__init__()
        if arch is None:
            if top_k is None:
                raise ValueError("FusedMoE needs top_k (or a whole arch row)")
            arch = MoEArch(top_k=int(top_k), scoring=scoring, renormalize=bool(renormalize), activation=activation,
                           n_group=int(n_group), topk_group=int(topk_group),
                           routed_scaling_factor=float(routed_scaling_factor),
                           score_correction=e_score_correction_bias is not None,
                           router_weight_on_input=bool(router_weight_on_input),
                           expert_bias=experts.w13_bias is not None, shared_experts=shared_experts is not None)
        get_activation(arch.activation)
        E = experts.num_experts
        arch.validate(E)
        have = {"score_correction": e_score_correction_bias is not None, "expert_bias": experts.w13_bias is not None,
                "shared_experts": shared_experts is not None}
        for name, present in have.items():
            if getattr(arch, name) != present:
                raise ValueError(f"arch.{name}={getattr(arch, name)} but the layer was given "
                                 f"{'a' if present else 'no'} tensor for it")
        if e_score_correction_bias is not None and tuple(e_score_correction_bias.shape) != (E,):
            raise ValueError(f"e_score_correction_bias must be [E={E}], got {list(e_score_correction_bias.shape)}")
        if shared_experts is not None:
            if shared_experts.num_experts != 1:
                raise ValueError(f"shared_experts must be one dense MLP (an experts object with E=1), "
                                 f"got E={shared_experts.num_experts}")
            if shared_experts.scheme.name != experts.scheme.name:
                raise ValueError(f"shared_experts are quantized in {shared_experts.scheme.name}, the experts in "
                                 f"{experts.scheme.name}: the shared MLP uses the layer's scheme")
        self.arch = arch
        self.experts = experts
        self.shared_experts = shared_experts
        self.e_score_correction_bias = (None if e_score_correction_bias is None
                                        else e_score_correction_bias.detach().to(torch.float32))

    def _check_inputs(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> None:
        """hidden [T, H] and router_logits [T, E] of this layer's H and E (shapes only: no host sync). Logits of
        another width would route to ids past the last expert, or never to the last ones, and compute."""
        E = self.experts.num_experts
        check_hidden("FusedMoE.forward", hidden, self.experts.hidden_size)
        T = hidden.shape[0]
        if tuple(router_logits.shape) != (T, E) or not router_logits.dtype.is_floating_point:
            raise ValueError(f"FusedMoE.forward: router_logits must be a float tensor [T={T}, E={E}] (one column "
                             f"an expert), got {router_logits.dtype} {list(router_logits.shape)}")
        if router_logits.device != hidden.device:
            raise ValueError(f"FusedMoE.forward: router_logits are on {router_logits.device}, hidden on "
                             f"{hidden.device}")

    # the row's fields, by their old names
    @property
    def top_k(self) -> int:
        return self.arch.top_k

    @property
    def renormalize(self) -> bool:
        return self.arch.renormalize

    @property
    def scoring(self) -> str:
        return self.arch.scoring

    @property
    def activation(self) -> str:
        return self.arch.activation

    @property
    def scheme(self):
        return self.experts.scheme

    @property
    def quant_config(self) -> Optional[MoEQuantConfig]:
        return self.experts.quant_config

    @property
    def shared_quant_config(self) -> Optional[MoEQuantConfig]:
        return None if self.shared_experts is None else self.shared_experts.quant_config

    def reference_kwargs(self) -> dict:
        """Keyword arguments of harness.moe.reference.reference_moe_trace for
        this layer besides (hidden, router_logits, quant_config): the row and
        the tensors it reads."""
        return {"arch": self.arch, "e_score_correction_bias": self.e_score_correction_bias,
                "shared_config": self.shared_quant_config}

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        self._check_inputs(hidden, router_logits)
        arch = self.arch
        topk_weights, topk_ids = routing.route_arch(router_logits, arch, self.e_score_correction_bias)
        # With a shared MLP both sums are kept in float32 (experts return their input's dtype).
        x = hidden.to(torch.float32) if self.shared_experts is not None else hidden
        if arch.router_weight_on_input:  # top_k == 1: the weight scales the input, the output is summed with 1
            x = hidden.to(torch.float32) * topk_weights
            topk_weights = torch.ones_like(topk_weights)
        if not self.experts.expects_unquantized_inputs and self.experts.quant_dtype is not None:
            x_dtype = x.dtype
            x, _ = quantize_input.moe_kernel_quantize_input(
                x.to(torch.float32), self.experts.a1_input_scale(), self.experts.quant_dtype,
                scale_mode=self.experts.scale_mode, backend=self.experts.op_backend)
            x = x.to(x_dtype)
        out = self.experts.apply(x, topk_weights, topk_ids, activation=arch.activation)
        if self.shared_experts is not None:
            T = hidden.shape[0]
            ones = torch.ones(T, 1, dtype=torch.float32, device=hidden.device)
            zeros = torch.zeros(T, 1, dtype=torch.int64, device=hidden.device)
            out = out + self.shared_experts.apply(hidden.to(torch.float32), ones, zeros, activation=arch.activation)
        return out.to(hidden.dtype)


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


def build_quant_config(scheme, w13, w2, *, a1_gscale=None, a2_gscale=None, a1_scale=None, a2_scale=None,
                       w13_bias=None, w2_bias=None, what: str = ""):
    s = get_scheme(scheme)
    dev = w13.device
    q13, g13 = quantize_expert_weights(w13, s)
    q2, g2 = quantize_expert_weights(w2, s)
    if not s.needs_act_gscale:
        a1_gscale = a2_gscale = None  # encode-side activation global scales are nvfp4-only
    elif a1_gscale is None or a2_gscale is None:
        raise ValueError(f"{s.name}: {what}a1_gscale and {what}a2_gscale (encode-side activation global scales, "
                         "448*6/amax) are required; calibrate_activation_scales() computes them")
    return MoEQuantConfig(s, q13, q2, g13, g2, a1_scale=_as_scalar_f32(a1_scale, dev),
                          a1_gscale=_as_scalar_f32(a1_gscale, dev), a2_scale=_as_scalar_f32(a2_scale, dev),
                          a2_gscale=_as_scalar_f32(a2_gscale, dev),
                          w13_bias=None if w13_bias is None else w13_bias.detach().to(device=dev, dtype=torch.float32),
                          w2_bias=None if w2_bias is None else w2_bias.detach().to(device=dev, dtype=torch.float32))


def _check_shapes(w13, w2, *, e_score_correction_bias=None, w13_bias=None, w2_bias=None, shared_w13=None,
                  shared_w2=None, **_):
    if w13.dim() != 3 or w2.dim() != 3 or w13.shape[0] != w2.shape[0] or w13.shape[1] != 2 * w2.shape[2] \
            or w13.shape[2] != w2.shape[1]:
        raise ValueError(f"need w13 [E, 2I, H] and w2 [E, H, I]; got {tuple(w13.shape)} and {tuple(w2.shape)}")
    E, I2, H = w13.shape
    want = {"e_score_correction_bias": (e_score_correction_bias, (E,)), "w13_bias": (w13_bias, (E, I2)),
            "w2_bias": (w2_bias, (E, H))}
    for name, (t, shape) in want.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    if shared_w13 is not None:
        if shared_w13.dim() != 2 or shared_w2.dim() != 2 or shared_w13.shape[1] != H or shared_w2.shape[0] != H \
                or shared_w13.shape[0] != 2 * shared_w2.shape[1]:
            raise ValueError(f"need shared_w13 [2S, H={H}] and shared_w2 [H={H}, S]; got "
                             f"{tuple(shared_w13.shape)} and {tuple(shared_w2.shape)}")


def build_emulated_moe(scheme, w13: torch.Tensor, w2: torch.Tensor, *, top_k: int, renormalize: bool = True,
                       scoring: str = "softmax", activation: str = "silu", n_group: int = 1, topk_group: int = 1,
                       routed_scaling_factor: float = 1.0, e_score_correction_bias: Optional[torch.Tensor] = None,
                       router_weight_on_input: bool = False, w13_bias: Optional[torch.Tensor] = None,
                       w2_bias: Optional[torch.Tensor] = None, shared_w13: Optional[torch.Tensor] = None,
                       shared_w2: Optional[torch.Tensor] = None, a1_gscale=None, a2_gscale=None,
                       shared_a1_gscale=None, shared_a2_gscale=None,
                       backend: str = "unfused", op_backend: str = "auto",
                       fused_precision: str = "auto", fused_mode: str = "auto",
                       keep_codes: bool = True) -> FusedMoE:
    """w13 [E, 2I, H] (gate then up), w2 [E, H, I], float -> FusedMoE.
    scheme "bf16": no quantization (weights kept as given, computed in float32).
    backend "unfused" (dequantize, torch.matmul in float32) or "fused" (Triton,
    harness/kernels/fused_gemm.py: fused_precision auto|ieee|bf16, fused_mode
    auto|fused|predequant); op_backend (auto|triton|torch) routes the QDQ and
    weight-dequant ops of the unfused path. keep_codes=False (fused only)
    releases the unpacked codes once the kernel weights are built
    (ExpertsBase; the float64 reference / oracle can then not run).

    Architecture (harness.moe.arch.MoEArch, built from these keywords):
    n_group / topk_group group-limited selection; e_score_correction_bias [E]
    for selection only; routed_scaling_factor on the routed output only;
    router_weight_on_input (top_k 1); w13_bias [E, 2I] / w2_bias [E, H] float
    biases after each GEMM; shared_w13 [2S, H] / shared_w2 [H, S] a dense MLP
    quantized in the same scheme, with its own activation global scales
    shared_a1_gscale / shared_a2_gscale (nvfp4; calibrate_activation_scales
    gives them), added unweighted."""
    s = get_scheme(scheme)
    tensors = dict(e_score_correction_bias=e_score_correction_bias, w13_bias=w13_bias, w2_bias=w2_bias,
                   shared_w13=shared_w13, shared_w2=shared_w2)
    _check_shapes(w13, w2, **tensors)
    arch = make_arch(top_k=top_k, renormalize=renormalize, scoring=scoring, activation=activation, n_group=n_group,
                     topk_group=topk_group, routed_scaling_factor=routed_scaling_factor,
                     router_weight_on_input=router_weight_on_input, num_experts=w13.shape[0], **tensors)
    kw = dict(backend=backend, op_backend=op_backend, fused_precision=fused_precision, fused_mode=fused_mode,
              keep_codes=keep_codes)
    shared = None
    if s.weight_fmt is None:
        experts = UnquantizedExperts(w13.detach(), w2.detach(), w13_bias=w13_bias, w2_bias=w2_bias, **kw)
        if shared_w13 is not None:
            shared = UnquantizedExperts(shared_w13.detach()[None], shared_w2.detach()[None], **kw)
    else:
        experts = make_experts(build_quant_config(s, w13, w2, a1_gscale=a1_gscale, a2_gscale=a2_gscale,
                                                  w13_bias=w13_bias, w2_bias=w2_bias), **kw)
        if shared_w13 is not None:
            shared = make_experts(build_quant_config(s, shared_w13[None], shared_w2[None], a1_gscale=shared_a1_gscale,
                                                     a2_gscale=shared_a2_gscale, what="shared_"), **kw)
    return FusedMoE(experts, arch=arch, e_score_correction_bias=e_score_correction_bias, shared_experts=shared)


def _amax(x: torch.Tensor) -> torch.Tensor:
    return x.abs().amax() if x.numel() else torch.zeros((), dtype=torch.float32, device=x.device)


@torch.no_grad()
def calibrate_activation_scales(w13, w2, hidden, router_logits, *, top_k, renormalize=True,
                                scoring="softmax", activation="silu", scheme=None, n_group=1, topk_group=1,
                                routed_scaling_factor=1.0, e_score_correction_bias=None,
                                router_weight_on_input=False, w13_bias=None, w2_bias=None,
                                shared_w13=None, shared_w2=None):
    """Encode-side activation global scales (a1_gscale, a2_gscale) of a
    two-level scheme (nvfp4 when None) = gs_numerator / amax (2688 / amax for
    nvfp4) of the GEMM inputs in the UNQUANTIZED forward over the samples.
    As vLLM's calibration: one scale per layer input, max over all tokens.
    The GEMM inputs are the layer's: hidden * routing weight with
    router_weight_on_input, act(GEMM1 + w13_bias) with biases.

    With shared_w13 / shared_w2 the shared MLP gets its OWN pair (vLLM's shared
    experts are separate linear layers with their own input scales), from its
    own GEMM inputs (hidden; act(hidden @ shared_w13.T)); the result is then
    (a1_gscale, a2_gscale, shared_a1_gscale, shared_a2_gscale)."""
    fmt = None if scheme is None else get_scheme(scheme).act_fmt
    tensors = dict(e_score_correction_bias=e_score_correction_bias, w13_bias=w13_bias, w2_bias=w2_bias,
                   shared_w13=shared_w13, shared_w2=shared_w2)
    _check_shapes(w13, w2, **tensors)
    arch = make_arch(top_k=top_k, renormalize=renormalize, scoring=scoring, activation=activation, n_group=n_group,
                     topk_group=topk_group, routed_scaling_factor=routed_scaling_factor,
                     router_weight_on_input=router_weight_on_input, num_experts=w13.shape[0], **tensors)
    act = get_activation(activation)
    x = hidden.to(torch.float32)
    w, ids = routing.route_arch(router_logits, arch, e_score_correction_bias)
    T, H = x.shape
    xin = x * w if arch.router_weight_on_input else x
    xs = xin.unsqueeze(1).expand(T, top_k, H).reshape(-1, H)
    flat = ids.reshape(-1)
    h = _grouped_gemm_unfused(xs, flat, w13.to(torch.float32))
    if w13_bias is not None:
        h = h + w13_bias.to(torch.float32).index_select(0, flat)
    a = act(h)
    out = (hf.nvfp4_global_scale(_amax(xin), fmt), hf.nvfp4_global_scale(_amax(a), fmt))
    if shared_w13 is None:
        return out
    sa = act(x @ shared_w13.to(torch.float32).T)
    return out + (hf.nvfp4_global_scale(_amax(x), fmt), hf.nvfp4_global_scale(_amax(sa), fmt))
