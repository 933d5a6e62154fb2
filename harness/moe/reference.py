"""Float64 reference MoE: the independent oracle of the property suites.

Written from the data flow in docs/design.md and the contract in docs/moe-api.md,
not from the layer's code. It is deliberately plain: no fusion, no custom ops,
every quantize-dequantize (QDQ) an explicit call of the spec's reference
quantizer `harness.formats.qdq`, everything else in float64.

Data flow (T tokens, E experts, top-k k, hidden H, intermediate I; the layer's
architecture is one row, harness.moe.arch.MoEArch, read here field by field):

    router_logits [T,E] --float64--> scores (softmax over E | sigmoid)
        selection keys: the exact logits (scores are strictly increasing in
        them); with e_score_correction_bias: fl32(score) + fl32(bias), a
        float32 addition (fl32(score): the float64 score rounded once)
        groups (n_group > 1): group score = float32 sum of the group's two
        best keys with a correction bias (one key for groups of one), else
        its best key; the topk_group best groups kept (equal group scores:
        LOWEST group index first), the other experts' keys -inf
        top-k: the k largest keys, equal keys to the LOWEST expert index
        weights = the selected UNBIASED scores, divided by their sum when
        renormalize; "softmax_topk": top-k of the logits, softmax (float64)
        over the k selected logits; then times routed_scaling_factor.
    x32 = hidden.to(float32)                                        [T,H]
    a1_in = x32, or fl32(x32 * fl32(weight)) with router_weight_on_input
            (top_k 1; the output is then summed with weight 1)
    a1  = qdq_act(a1_in)  --float64-->                              [T,H]   (QDQ #1)
    for every (token t, slot j) with expert e = ids[t,j]  (P = T*k pairs,
    token-major order, the layout of vLLM's intermediate cache):
        h  = a1[t] @ dequant(w13)[e].T  (+ w13_bias[e])   float64   [2I]
        g  = act(h[:I], h[I:])                            float64   [I]
                 silu:         silu(gate) * up
                 swiglu_clamp: gate' = min(gate, 7), up' = clamp(up, -7, 7),
                               gate' * sigmoid(1.702 gate') * (up' + 1)
    a2  = qdq_act(fl32(g))  --float64-->                            [P,I]   (QDQ #2)
    y   = a2 @ dequant(w2)[e].T  (+ w2_bias[e])           float64   [P,H]
    routed[t] = sum_j weight[t,j] * y[t,j]                float64   [T,H]
    shared[t] = the same pass for the shared MLP (one expert, weight 1, input
                x32, its own config and activation scales), when present
    out = routed + shared                                 float64   [T,H]

Biases are float32 tensors (promoted exactly) added to the fully scaled GEMM
result: never multiplied by a weight or activation scale.

Where float32 rounding happens, and why exactly there (the layer's contract):
    * The QDQ inputs are float32 tensors, because the layer quantizes float32
      activations and the spec's quantizer is defined on them (NVFP4's block
      scale and element roundings are float32 operations; the same real value
      rounded to float64 instead would be a different quantizer).
    * QDQ #1 therefore sees exactly the layer's tensor: hidden cast to float32
      (with router_weight_on_input: its float32 product with the weight, here
      the float32-rounded reference weight; the layer's own float32 weight
      may differ by its rounding, bounded in harness/moe/tolerance.py).
    * QDQ #2 sees fl32(g): the float64 intermediate rounded ONCE to float32,
      i.e. the float32 tensor closest to the exact intermediate. The layer's
      own intermediate is a float32 GEMM + activation result; it differs from
      fl32(g) by its accumulation error only. That difference is bounded (and
      its effect on QDQ #2 made explicit, code flips included) in
      harness/moe/tolerance.py; nothing here depends on the layer.
    * QDQ outputs are exact float32 values; they are promoted to float64
      losslessly. Dequantized weights are float32 values (hf.dequantize),
      promoted losslessly. Everything else is float64.

Scales (docs/moe-api.md, docs/numerics.md):
    * NVFP4 weights: per-expert ENCODE-side global scales quant_config.w13_gscale
      / w2_gscale [E]; the value of a code is e2m1(code) * fl32(s / gs_e)
      (hf.dequantize with the per-expert global scale). A missing one raises.
    * NVFP4 activations: encode-side a1_gscale / a2_gscale (scalars). A missing
      one raises ValueError: never a silent 1.0 (UPSTREAM-BUGS #46254).
    * OCP MX activations: the scheme's scale_mode ("even" as vLLM/Quark), RNE.
    * "fp8" activations (w_mxfp4_a_fp8): per-tensor float8_e4m3fn QDQ with the
      DECODE-side scale a1_scale / a2_scale (value = e4m3(x / s) * s,
      saturating at +-448); a None scale means dynamic per-tensor scaling,
      s = amax / 448 over the whole QDQ input (all T tokens for a1, all T*k
      pairs for a2). See `_qdq_per_tensor`.
    * weight-only schemes: no activation QDQ at all.

`reference_moe_trace` returns every intermediate (for tolerance bounds);
`reference_moe` returns only the output.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

import harness.formats as hf
from harness.moe.arch import MoEArch  # the architecture ROW only (data)
from harness.moe.config import require_codes  # the released-codes guard only (no numerics)
from harness.moe.schemes import SCHEMES  # the scheme TABLE only (data)
from harness.schemes import PER_TENSOR_FORMATS
from harness.formats import minifloat

F64 = torch.float64
F32 = torch.float32

SWIGLU_LIMIT = 7.0
SWIGLU_ALPHA = 1.702
ACTIVATIONS = ("silu", "swiglu_clamp")
SCORINGS = ("softmax", "sigmoid", "softmax_topk")


# --------------------------------------------------------------------------- scheme
def resolve_scheme(scheme):
    """A Scheme object, from itself or from its name (harness.moe.schemes)."""
    if isinstance(scheme, str):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}")
        return SCHEMES[scheme]
    return scheme


# --------------------------------------------------------------------------- routing
def _arch_of(top_k, scoring, renormalize, n_group, topk_group, routed_scaling_factor, bias, on_input=False,
             activation="silu"):
    return MoEArch(top_k=int(top_k), scoring=scoring, renormalize=bool(renormalize), activation=activation,
                   n_group=int(n_group), topk_group=int(topk_group),
                   routed_scaling_factor=float(routed_scaling_factor), score_correction=bias is not None,
                   router_weight_on_input=bool(on_input))


def _scores64(logits64: torch.Tensor, scoring: str) -> torch.Tensor:
    return torch.softmax(logits64, dim=-1) if scoring == "softmax" else torch.sigmoid(logits64)


def reference_keys(router_logits: torch.Tensor, scoring: str, e_score_correction_bias=None) -> torch.Tensor:
    """float64 [T,E] selection keys (exact values): the logits, or with a
    correction bias the float32 sum fl32(score) + fl32(bias)."""
    logits = router_logits.detach().cpu().to(F64)
    if e_score_correction_bias is None:
        return logits
    b32 = torch.as_tensor(e_score_correction_bias).detach().cpu().to(F32)
    return (_scores64(logits, scoring).to(F32) + b32).to(F64)


def _f32_sum(a: float, b: float) -> float:
    return float(torch.tensor(a, dtype=F32) + torch.tensor(b, dtype=F32))


def reference_select(keys: torch.Tensor, arch: MoEArch):
    """(ids int64 [T,k], eligible bool [T,E]): plain per-token selection on
    exact keys, ties to the lowest index (groups likewise)."""
    T, E = keys.shape
    k, G = arch.top_k, arch.n_group
    gsz = E // G
    ids = torch.zeros(T, k, dtype=torch.int64)
    eligible = torch.zeros(T, E, dtype=torch.bool)
    for t in range(T):
        row = keys[t].tolist()
        experts = list(range(E))
        if G > 1:
            gscore = []
            for g in range(G):
                top = sorted(row[g * gsz:(g + 1) * gsz], reverse=True)
                if arch.group_score == "top2_sum":
                    gscore.append(top[0] if len(top) == 1 else _f32_sum(top[0], top[1]))
                else:
                    gscore.append(top[0])
            kept = sorted(range(G), key=lambda g: (-gscore[g], g))[: arch.topk_group]
            experts = [e for g in sorted(kept) for e in range(g * gsz, (g + 1) * gsz)]
        eligible[t, experts] = True
        ids[t] = torch.tensor(sorted(experts, key=lambda e: (-row[e], e))[:k], dtype=torch.int64)
    return ids, eligible


def reference_weights(router_logits: torch.Tensor, ids: torch.Tensor, arch: MoEArch) -> torch.Tensor:
    """float64 [T,k] routing weights of the experts `ids` (unbiased scores)."""
    logits = router_logits.detach().cpu().to(F64)
    if arch.scoring == "softmax_topk":
        weights = torch.softmax(torch.gather(logits, 1, ids), dim=-1)
    else:
        weights = torch.gather(_scores64(logits, arch.scoring), 1, ids)
        if arch.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * float(arch.routed_scaling_factor)


def exp_argument_spread(router_logits: torch.Tensor, ids: torch.Tensor, scoring: str) -> torch.Tensor:
    """float64 [T,k]: the term of the routing weights' bound for a softmax's
    rounded exp arguments (harness.moe.tolerance, term 6): d_j + max d + (E -
    1) / e per chosen expert j, d = m - x_j with m the largest logit the
    softmax runs over (the row's, or the k chosen for "softmax_topk"); 0 for
    sigmoid, whose argument is exact."""
    logits = router_logits.detach().cpu().to(F64)
    T, E = logits.shape
    if scoring == "sigmoid":
        return torch.zeros(ids.shape, dtype=F64)
    chosen = torch.gather(logits, 1, ids.cpu())
    m = chosen if scoring == "softmax_topk" else logits
    d = m.max(dim=-1, keepdim=True).values - chosen
    d = torch.where(torch.isfinite(d), d, 0.0)  # a -inf logit's exp is exactly 0 (+inf: NaN weights either way)
    return d + d.max(dim=-1, keepdim=True).values + (E - 1) / math.e


def reference_route(router_logits: torch.Tensor, top_k: int, *, scoring: str = "softmax", renormalize: bool = False,
                    n_group: int = 1, topk_group: int = 1, routed_scaling_factor: float = 1.0,
                    e_score_correction_bias=None):
    """(weights float64 [T,k], ids int64 [T,k]); ties to the lowest expert index."""
    if scoring not in SCORINGS:
        raise ValueError(f"unknown scoring {scoring!r}")
    T, E = router_logits.shape
    if not 1 <= top_k <= E:
        raise ValueError(f"top_k={top_k} outside 1..{E}")
    arch = _arch_of(top_k, scoring, renormalize, n_group, topk_group, routed_scaling_factor,
                    e_score_correction_bias).validate(E)
    # Without a correction bias the keys are the exact logits: softmax (per row)
    # and sigmoid are strictly increasing, so the k largest scores are the k
    # largest LOGITS; selecting on rounded scores would not be exact (torch's
    # CPU sigmoid rounds equal inputs differently in its vector body and its
    # scalar tail, and distinct logits can round to one score).
    keys = reference_keys(router_logits, scoring, e_score_correction_bias)
    ids, _ = reference_select(keys, arch)
    return reference_weights(router_logits, ids, arch), ids


# --------------------------------------------------------------------------- activations
def reference_activation(h: torch.Tensor, activation: str) -> torch.Tensor:
    """float64 [P, 2I] (gate then up) -> [P, I]."""
    I = h.shape[-1] // 2
    gate, up = h[..., :I], h[..., I:]
    if activation == "silu":
        return gate * torch.sigmoid(gate) * up
    if activation == "swiglu_clamp":
        gate = torch.clamp(gate, max=SWIGLU_LIMIT)
        up = torch.clamp(up, min=-SWIGLU_LIMIT, max=SWIGLU_LIMIT)
        return gate * torch.sigmoid(SWIGLU_ALPHA * gate) * (up + 1.0)
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


# --------------------------------------------------------------------------- QDQ
def _qdq_per_tensor(x32: torch.Tensor, scale, e4m3) -> torch.Tensor:
    """Per-tensor minifloat QDQ (element `e4m3`, E4M3FN for "fp8") with a
    decode-side scale (None: amax / max_normal)."""
    if scale is None:
        amax = x32.abs().amax() if x32.numel() else torch.zeros((), dtype=F32)
        # divided by a tensor: correctly rounded on every device (a Python-scalar
        # divisor becomes a reciprocal multiply in torch's CUDA kernels)
        s = torch.where(amax > 0, amax / torch.full_like(amax, e4m3.max_normal), torch.ones_like(amax)).to(F32)
    else:
        s = torch.as_tensor(scale).to(F32).reshape(())
    # e4m3 encode (RNE, saturating) of x/s, via the spec's element codec.

    codes = minifloat.encode(e4m3, x32 / s, "rne")
    return minifloat.decode(e4m3, codes) * s


def qdq_activation(x32: torch.Tensor, scheme, *, scale=None, gscale=None, which: str = "a1") -> torch.Tensor:
    """One activation QDQ of a float32 tensor under `scheme`; float32 result.

    Identity for weight-only schemes (act_fmt None)."""
    if x32.dtype != F32:
        raise ValueError(f"{which}: activation QDQ input must be float32, got {x32.dtype}")
    scale = None if scale is None else torch.as_tensor(scale).to(device=x32.device)
    gscale = None if gscale is None else torch.as_tensor(gscale).to(device=x32.device)
    scheme = resolve_scheme(scheme)
    act = getattr(scheme, "act_fmt", None)
    if act is None:
        return x32
    if act in PER_TENSOR_FORMATS:
        return _qdq_per_tensor(x32, scale, getattr(hf, PER_TENSOR_FORMATS[act].element))
    spec = hf.FORMATS[act]
    if x32.numel() == 0:
        return x32.clone()
    if spec.has_global_scale:
        if gscale is None:
            raise ValueError(f"{scheme.name}: {which}_gscale is required for {act} activations (got None)")
        return hf.qdq(x32, act, global_scale=torch.as_tensor(gscale).to(F32))
    return hf.qdq(x32, act, scale_mode=getattr(scheme, "scale_mode", "even") or "even", rounding="rne")


def dequant_weight(q, gscale, scheme, which: str) -> torch.Tensor:
    """QuantizedTensor [E, N, K] -> float64 values (exact promotion of float32)."""
    spec = hf.get_format(q.fmt)
    if spec.has_global_scale:
        if gscale is None:
            raise ValueError(f"{getattr(scheme, 'name', scheme)}: {which}_gscale is required for {q.fmt} weights")
        E = q.codes.shape[0]
        gs = torch.as_tensor(gscale).to(device=q.codes.device, dtype=F32).reshape(E, 1)
        q = hf.QuantizedTensor(
            codes=q.codes, scales=q.scales, global_scale=gs, fmt=q.fmt,
            scale_mode=q.scale_mode, rounding=q.rounding, dtype=F32,
        )
    return hf.dequantize(q, F32).to(F64)


# --------------------------------------------------------------------------- MoE
@dataclass
class ReferenceTrace:
    """Every intermediate of one reference forward (P = T*k pairs, token-major).
    The shared MLP's pass is a trace of its own (`shared`, one expert, k = 1)."""

    weights: torch.Tensor  # float64 [T,k] routing weights (scaling included)
    ids: torch.Tensor  # int64 [T,k]
    w13: torch.Tensor  # float64 [E,2I,H] dequantized
    w2: torch.Tensor  # float64 [E,H,I]
    a1: torch.Tensor  # float64 [T,H]   QDQ #1 output
    h: torch.Tensor  # float64 [P,2I]  first GEMM (+ w13 bias)
    g: torch.Tensor  # float64 [P,I]   activation output (exact, before fl32)
    a2_in: torch.Tensor  # float32 [P,I] = fl32(g), the QDQ #2 input
    a2: torch.Tensor  # float64 [P,I]   QDQ #2 output
    y: torch.Tensor  # float64 [P,H]   second GEMM (+ w2 bias)
    out: torch.Tensor  # float64 [T,H]   routed + shared
    arch: Optional[MoEArch] = None
    a1_in: Optional[torch.Tensor] = None  # float32 [T,H] the QDQ #1 input
    combine: Optional[torch.Tensor] = None  # float64 [T,k] weights of the output sum (ones: weight on input)
    b13: Optional[torch.Tensor] = None  # float64 [P,2I] each pair's w13 bias row (None: no biases)
    b2: Optional[torch.Tensor] = None  # float64 [P,H]
    routed: Optional[torch.Tensor] = None  # float64 [T,H] the routed sum alone
    shared: Optional["ReferenceTrace"] = None  # the shared MLP's pass
    keys: Optional[torch.Tensor] = None  # float64 [T,E] selection keys (exact)
    eligible: Optional[torch.Tensor] = None  # bool [T,E] experts of the kept groups
    config: Optional[object] = None  # the quant config of this pass (scheme, activation scales)
    spread: Optional[torch.Tensor] = None  # float64 [T,k] exp_argument_spread of the weights (None: zeros)


def _per_expert(x: torch.Tensor, e_of: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.shape[0], w.shape[1], dtype=F64)
    for e in range(w.shape[0]):
        rows = (e_of == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            out[rows] = x[rows] @ w[e].T
    return out


def _bias_rows(bias, e_of: torch.Tensor):
    if bias is None:
        return None
    return torch.as_tensor(bias).detach().cpu().to(F32).to(F64)[e_of]


def _experts_pass(a1_in: torch.Tensor, ids: torch.Tensor, combine: torch.Tensor, cfg, activation: str) -> dict:
    """One experts pass of the data flow from the float32 QDQ #1 input."""
    scheme = resolve_scheme(cfg.scheme)
    w13 = dequant_weight(cfg.w13_q, getattr(cfg, "w13_gscale", None), scheme, "w13").cpu()
    w2 = dequant_weight(cfg.w2_q, getattr(cfg, "w2_gscale", None), scheme, "w2").cpu()
    E, I2, H = w13.shape
    I = I2 // 2
    if tuple(w2.shape) != (E, H, I):
        raise ValueError(f"w2 shape {tuple(w2.shape)} does not match w13 {tuple(w13.shape)}")
    T, k = ids.shape
    a1 = qdq_activation(a1_in, scheme, scale=getattr(cfg, "a1_scale", None),
                        gscale=getattr(cfg, "a1_gscale", None), which="a1").to(F64)
    P = T * k
    tok = torch.arange(T).repeat_interleave(k)
    e_of = ids.reshape(P)
    b13, b2 = _bias_rows(getattr(cfg, "w13_bias", None), e_of), _bias_rows(getattr(cfg, "w2_bias", None), e_of)
    h = _per_expert(a1[tok], e_of, w13)
    if b13 is not None:
        h = h + b13
    g = reference_activation(h, activation)
    # QDQ #2 on the float32-rounded intermediate.
    a2_in = g.to(F32)
    a2 = qdq_activation(a2_in, scheme, scale=getattr(cfg, "a2_scale", None),
                        gscale=getattr(cfg, "a2_gscale", None), which="a2").to(F64)
    y = _per_expert(a2, e_of, w2)
    if b2 is not None:
        y = y + b2
    out = (combine.reshape(T, k, 1) * y.reshape(T, k, H)).sum(dim=1)
    return dict(w13=w13, w2=w2, a1=a1, h=h, g=g, a2_in=a2_in, a2=a2, y=y, out=out, a1_in=a1_in, b13=b13, b2=b2)


def reference_moe_trace(
    hidden: torch.Tensor,
    router_logits: torch.Tensor,
    quant_config,
    *,
    top_k: Optional[int] = None,
    renormalize: bool = True,
    scoring: str = "softmax",
    activation: str = "silu",
    topk_ids: Optional[torch.Tensor] = None,
    arch: Optional[MoEArch] = None,
    n_group: int = 1,
    topk_group: int = 1,
    routed_scaling_factor: float = 1.0,
    e_score_correction_bias=None,
    router_weight_on_input: bool = False,
    shared_config=None,
) -> ReferenceTrace:
    """The reference forward, with every intermediate. The architecture is
    `arch` (a MoEArch row; it replaces the flat keywords) or built from the flat
    keywords; the tensors it reads: quant_config.w13_bias / w2_bias (expert
    biases), e_score_correction_bias [E], shared_config (the shared MLP's
    MoEQuantConfig, one expert). `topk_ids` (optional) overrides the selection
    (weights are still the reference's scores of those experts)."""
    cfg = quant_config
    for c in (cfg, shared_config):
        require_codes(c, "reference_moe_trace (the float64 reference MoE)")
    E = cfg.w13_q.codes.shape[0]
    if arch is None:
        if top_k is None:
            raise ValueError("reference_moe_trace needs top_k (or an arch row)")
        arch = _arch_of(top_k, scoring, renormalize, n_group, topk_group, routed_scaling_factor,
                        e_score_correction_bias, router_weight_on_input, activation)
        arch = arch.replace(expert_bias=getattr(cfg, "w13_bias", None) is not None,
                            shared_experts=shared_config is not None)
    arch.validate(E)
    if arch.score_correction != (e_score_correction_bias is not None):
        raise ValueError(f"arch.score_correction={arch.score_correction} but e_score_correction_bias is "
                         f"{'given' if e_score_correction_bias is not None else 'None'}")
    if arch.shared_experts != (shared_config is not None):
        raise ValueError(f"arch.shared_experts={arch.shared_experts} but shared_config is "
                         f"{'given' if shared_config is not None else 'None'}")
    if arch.expert_bias != (getattr(cfg, "w13_bias", None) is not None):
        raise ValueError(f"arch.expert_bias={arch.expert_bias} but the quant config's w13_bias is "
                         f"{'set' if getattr(cfg, 'w13_bias', None) is not None else 'None'}")
    T = hidden.shape[0]
    H = cfg.w13_q.codes.shape[2]
    if tuple(hidden.shape) != (T, H) or tuple(router_logits.shape) != (T, E):
        raise ValueError(f"hidden {tuple(hidden.shape)} / router_logits {tuple(router_logits.shape)} vs H={H}, E={E}")

    logits = router_logits.detach().cpu()
    keys = reference_keys(logits, arch.scoring, e_score_correction_bias)
    ids, eligible = reference_select(keys, arch)
    if topk_ids is not None:
        ids = topk_ids.to(torch.int64).cpu()
    weights = reference_weights(logits, ids, arch)

    # QDQ #1 input: the layer's own float32 activations (times the weight on input).
    x32 = hidden.detach().cpu().to(F32)
    combine = weights
    a1_in = x32
    if arch.router_weight_on_input:
        a1_in = x32 * weights.to(F32)  # k == 1: [T,1] broadcast, one float32 rounding
        combine = torch.ones_like(weights)
    r = _experts_pass(a1_in, ids, combine, cfg, arch.activation)
    shared = None
    out = r["out"]
    if shared_config is not None:
        ones = torch.ones(T, 1, dtype=F64)
        s = _experts_pass(x32, torch.zeros(T, 1, dtype=torch.int64), ones, shared_config, arch.activation)
        shared_arch = MoEArch(top_k=1, renormalize=False, activation=arch.activation)
        shared = ReferenceTrace(ones, torch.zeros(T, 1, dtype=torch.int64), s["w13"], s["w2"], s["a1"], s["h"],
                                s["g"], s["a2_in"], s["a2"], s["y"], s["out"], arch=shared_arch, a1_in=s["a1_in"],
                                combine=ones, routed=s["out"], config=shared_config)
        out = out + s["out"]
    return ReferenceTrace(weights, ids, r["w13"], r["w2"], r["a1"], r["h"], r["g"], r["a2_in"], r["a2"], r["y"], out,
                          arch=arch, a1_in=a1_in, combine=combine, b13=r["b13"], b2=r["b2"], routed=r["out"],
                          shared=shared, keys=keys, eligible=eligible, config=cfg,
                          spread=exp_argument_spread(logits, ids, arch.scoring))


def reference_moe(
    hidden: torch.Tensor,
    router_logits: torch.Tensor,
    quant_config,
    *,
    top_k: Optional[int] = None,
    renormalize: bool = True,
    scoring: str = "softmax",
    activation: str = "silu",
    **kw,
) -> torch.Tensor:
    """float64 [T,H] output of the reference MoE (see the module docstring)."""
    return reference_moe_trace(
        hidden, router_logits, quant_config, top_k=top_k, renormalize=renormalize,
        scoring=scoring, activation=activation, **kw,
    ).out
