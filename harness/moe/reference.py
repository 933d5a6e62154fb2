"""Float64 reference MoE: the independent oracle of the property suites.

Written from the data flow in docs/design.md and the contract in docs/moe-api.md,
not from the layer's code. It is deliberately plain: no fusion, no custom ops,
every quantize-dequantize (QDQ) an explicit call of the spec's reference
quantizer `harness.formats.qdq`, everything else in float64.

Data flow (T tokens, E experts, top-k k, hidden H, intermediate I):

    router_logits [T,E] --float64--> scores (softmax over E | sigmoid)
        top-k: the k largest scores = the k largest logits (both scorings are
        strictly increasing), selected on the exact logits; ties (equal
        logits) to the LOWEST expert index (a stable descending sort);
        weights = the selected scores, divided by their sum when renormalize.
    x32 = hidden.to(float32)                                        [T,H]
    a1  = qdq_act(x32)  --float64-->                                [T,H]   (QDQ #1)
    for every (token t, slot j) with expert e = ids[t,j]  (P = T*k pairs,
    token-major order, the layout of vLLM's intermediate cache):
        h  = a1[t] @ dequant(w13)[e].T                    float64   [2I]
        g  = act(h[:I], h[I:])                            float64   [I]
                 silu:         silu(gate) * up
                 swiglu_clamp: gate' = min(gate, 7), up' = clamp(up, -7, 7),
                               gate' * sigmoid(1.702 gate') * (up' + 1)
    a2  = qdq_act(fl32(g))  --float64-->                            [P,I]   (QDQ #2)
    y   = a2 @ dequant(w2)[e].T                           float64   [P,H]
    out[t] = sum_j weight[t,j] * y[t,j]                   float64   [T,H]

Where float32 rounding happens, and why exactly there (the layer's contract):
    * The QDQ inputs are float32 tensors, because the layer quantizes float32
      activations and the spec's quantizer is defined on them (NVFP4's block
      scale and element roundings are float32 operations; the same real value
      rounded to float64 instead would be a different quantizer).
    * QDQ #1 therefore sees exactly the layer's tensor: hidden cast to float32.
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

from dataclasses import dataclass
from typing import Optional

import torch

import harness.formats as hf
from harness.moe.schemes import SCHEMES  # the scheme TABLE only (data)
from harness.schemes import PER_TENSOR_FORMATS
from harness.formats import minifloat

F64 = torch.float64
F32 = torch.float32

SWIGLU_LIMIT = 7.0
SWIGLU_ALPHA = 1.702
ACTIVATIONS = ("silu", "swiglu_clamp")
SCORINGS = ("softmax", "sigmoid")


# --------------------------------------------------------------------------- scheme
def resolve_scheme(scheme):
    """A Scheme object, from itself or from its name (harness.moe.schemes)."""
    if isinstance(scheme, str):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}")
        return SCHEMES[scheme]
    return scheme


# --------------------------------------------------------------------------- routing
def reference_route(router_logits: torch.Tensor, top_k: int, *, scoring: str = "softmax", renormalize: bool = False):
    """(weights float64 [T,k], ids int64 [T,k]); ties to the lowest expert index."""
    if scoring not in SCORINGS:
        raise ValueError(f"unknown scoring {scoring!r}")
    logits = router_logits.to(F64)
    T, E = logits.shape
    if not 1 <= top_k <= E:
        raise ValueError(f"top_k={top_k} outside 1..{E}")
    scores = torch.softmax(logits, dim=-1) if scoring == "softmax" else torch.sigmoid(logits)
    # Softmax (per row) and sigmoid are strictly increasing, so the k largest
    # scores are exactly the k largest LOGITS; selecting on the logits is exact,
    # where selecting on rounded scores is not (torch's CPU sigmoid rounds equal
    # inputs differently in its vector body and its scalar tail, and distinct
    # logits can round to one score). Ties are equal logits; the stable
    # descending sort keeps them in index order: lowest index first.
    order = torch.sort(logits, dim=-1, descending=True, stable=True).indices
    ids = order[:, :top_k].contiguous()
    weights = torch.gather(scores, 1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


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
    """Every intermediate of one reference forward (P = T*k pairs, token-major)."""

    weights: torch.Tensor  # float64 [T,k]
    ids: torch.Tensor  # int64 [T,k]
    w13: torch.Tensor  # float64 [E,2I,H] dequantized
    w2: torch.Tensor  # float64 [E,H,I]
    a1: torch.Tensor  # float64 [T,H]   QDQ #1 output
    h: torch.Tensor  # float64 [P,2I]  first GEMM
    g: torch.Tensor  # float64 [P,I]   activation output (exact, before fl32)
    a2_in: torch.Tensor  # float32 [P,I] = fl32(g), the QDQ #2 input
    a2: torch.Tensor  # float64 [P,I]   QDQ #2 output
    y: torch.Tensor  # float64 [P,H]   second GEMM
    out: torch.Tensor  # float64 [T,H]


def reference_moe_trace(
    hidden: torch.Tensor,
    router_logits: torch.Tensor,
    quant_config,
    *,
    top_k: int,
    renormalize: bool,
    scoring: str = "softmax",
    activation: str = "silu",
    topk_ids: Optional[torch.Tensor] = None,
) -> ReferenceTrace:
    """The reference forward, with every intermediate. `topk_ids` (optional)
    overrides the selection (weights are still the reference's scores)."""
    scheme = resolve_scheme(quant_config.scheme)
    cfg = quant_config
    w13 = dequant_weight(cfg.w13_q, getattr(cfg, "w13_gscale", None), scheme, "w13")
    w2 = dequant_weight(cfg.w2_q, getattr(cfg, "w2_gscale", None), scheme, "w2")
    E, I2, H = w13.shape
    I = I2 // 2
    if tuple(w2.shape) != (E, H, I):
        raise ValueError(f"w2 shape {tuple(w2.shape)} does not match w13 {tuple(w13.shape)}")
    T = hidden.shape[0]
    if tuple(hidden.shape) != (T, H) or tuple(router_logits.shape) != (T, E):
        raise ValueError(f"hidden {tuple(hidden.shape)} / router_logits {tuple(router_logits.shape)} vs H={H}, E={E}")

    weights, ids = reference_route(router_logits.cpu(), top_k, scoring=scoring, renormalize=renormalize)
    if topk_ids is not None:
        ids = topk_ids.to(torch.int64).cpu()
        scores = (torch.softmax if scoring == "softmax" else (lambda x, dim: torch.sigmoid(x)))(
            router_logits.cpu().to(F64), dim=-1
        )
        weights = torch.gather(scores, 1, ids)
        if renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
    w13, w2 = w13.cpu(), w2.cpu()

    # QDQ #1: the layer's own float32 activations.
    x32 = hidden.detach().cpu().to(F32)
    a1 = qdq_activation(x32, scheme, scale=getattr(cfg, "a1_scale", None),
                        gscale=getattr(cfg, "a1_gscale", None), which="a1").to(F64)

    # First GEMM and activation, float64, pair by pair grouped per expert.
    P = T * top_k
    tok = torch.arange(T).repeat_interleave(top_k)
    exp_of_pair = ids.reshape(P)
    h = torch.zeros(P, I2, dtype=F64)
    for e in range(E):
        rows = (exp_of_pair == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            h[rows] = a1[tok[rows]] @ w13[e].T
    g = reference_activation(h, activation)

    # QDQ #2 on the float32-rounded intermediate.
    a2_in = g.to(F32)
    a2 = qdq_activation(a2_in, scheme, scale=getattr(cfg, "a2_scale", None),
                        gscale=getattr(cfg, "a2_gscale", None), which="a2").to(F64)

    y = torch.zeros(P, H, dtype=F64)
    for e in range(E):
        rows = (exp_of_pair == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            y[rows] = a2[rows] @ w2[e].T
    out = (weights.reshape(T, top_k, 1) * y.reshape(T, top_k, H)).sum(dim=1)
    return ReferenceTrace(weights, ids, w13, w2, a1, h, g, a2_in, a2, y, out)


def reference_moe(
    hidden: torch.Tensor,
    router_logits: torch.Tensor,
    quant_config,
    *,
    top_k: int,
    renormalize: bool,
    scoring: str = "softmax",
    activation: str = "silu",
) -> torch.Tensor:
    """float64 [T,H] output of the reference MoE (see the module docstring)."""
    return reference_moe_trace(
        hidden, router_logits, quant_config, top_k=top_k, renormalize=renormalize,
        scoring=scoring, activation=activation,
    ).out
