"""Derived tolerance of the emulated MoE layer against the float64 reference
(harness.moe.reference): the one tolerance model used by `moe-harness run`,
the property suites and the lm-eval oracle gate. The architecture (grouped
selection, correction bias, routed scaling, router weight on input, biases,
shared MLP) is the trace's row (harness.moe.arch.MoEArch).

u = 2^-24 (float32 unit roundoff), gamma_n = n u / (1 - n u). The bound is a
sum of NAMED terms (TERMS; output_tolerance(scale={term: f}) scales one, the
witness tests in suites/properties/test_moe_tolerance_witnesses.py drop each):

1. QDQ #1 (a1): the layer and the reference quantize the SAME float32 tensor
   (hidden.float()) with the same spec, and the dequantized expert weights are
   the same float32 values (both bit-identical to hf.dequantize by contract).
   So the GEMM inputs agree exactly and contribute no error term. Except with
   the router weight on the input (k = 1): the layer quantizes fl32(x w32),
   the reference fl32(x fl32(w)); |w32 - fl32(w)| <= dw + u|w|, so the QDQ #1
   input lies within din = |x| (dw + 3u|w|) of the reference's ["input_weight"]
   and its QDQ output anywhere in qdq_interval(a1_in, din) (below)
   ["qdq1_flip"]; da1 = max(hi - a1, a1 - lo) adds |W13_e| da1 to dh.
2. GEMM1 in float32 (any summation order): dh = gamma_H |a1| |W13_e|^T
   ["gemm1"] (standard dot-product bound, products rounded too). Expert bias:
   the float32 addition h = G + b rounds by u (|h| + dh) ["bias_rounding"].
3. Activation in float32: silu(x) = x sigmoid(x) and x sigmoid(1.702 x) have
   |d/dx| <= 1.1; clamps are 1-Lipschitz; their float32 evaluation adds c u
   relative (c = 8 silu; 12 + 2 |1.702 gate| swiglu, whose sigmoid argument
   is rounded) and |gate| 2^-126 absolute (float32 sigmoid is 0 below -88.7)
   ["activation"]. With s = act(gate):
   dg = (1.1 dgate + c u (|s| + 1.1 dgate) + |gate| 2^-126) (|up'| + dup) + |s| dup + 2u|g|,
   then x2 (second-order terms) + u|g| (the reference itself feeds fl32(g)).
4. QDQ #2 (a2) is where float32-vs-float64 noise could be amplified: an input
   within dg of a rounding boundary can flip an element code, and for NVFP4 a
   block amax near an E4M3 boundary can flip the whole block's scale. Instead
   of a loose "one code step everywhere" term, `qdq_interval` computes, per
   element, the exact range of QDQ outputs over ALL inputs in [g - dg, g + dg]:
   every block scale the block's amax range can produce (E8M0 byte, E4M3 code,
   or fp8 per-tensor scale) and, per scale, the element QDQ at both ends (QDQ
   with a fixed scale is monotone). Where no decision is ambiguous (nearly
   always) the range is a single value and the term is 0; where one is, the
   term is exactly the flip ["qdq2_flip"]. da2 = max(hi - a2, a2 - lo).
5. GEMM2: dy = |W2_e| da2 + gamma_I |W2_e| max(|lo|, |hi|) ["gemm2"]; expert
   bias: + u (|y| + dy) ["bias_rounding"].
6. Routing weights (float32 softmax/sigmoid/softmax over the k selected +
   renormalize, times the routed scaling factor): relative error
   <= (2E + 2k + 18 + s_j) u, plus 2^-140 absolute ["routing_weights"]. s_j
   (reference.exp_argument_spread) is the softmax's rounded exp argument
   fl(x - max): exp(fl(x_j - m)) is off by up to u |x_j - m| relative, the
   sum of the chosen weights by up to the largest of those, and the row's
   sum by (E - 1) / e u (d e^-d <= 1/e); s_j = d_j + max_chosen d + (E - 1)
   / e with d = m - x, 0 for sigmoid. The absolute part covers weights
   below float32's normal range (subnormal steps of 2^-149, a few
   roundings, times a routed scaling up to 64); with the weight on the input the
   output sum has weight 1 (dw = 0). Weighted sum over k (float32):
   gamma_(k+1) ["sum"]. Shared MLP: its pass (steps 2-5, input hidden.float(),
   one expert, weight 1, its own config) adds its dy_s, and routed + shared
   one more rounding u (|routed| + |shared|) ["sum"]. Output cast to the
   dtype the layer returns: u_out (|out| + bound), u_out = 0 for float32,
   2^-8 bfloat16, 2^-11 float16 ["output_cast"].
   tol = 2 * bound ["second_order"] + 2^-140, bound =
     sum_j |w_j| dy_j + dw_j (|y_j| + dy_j) + gamma_(k+1) sum_j (|w_j| + dw_j)(|y_j| + dy_j)
     [+ dy_s + u (|routed| + bound + |y_s| + dy_s)] + u_out (|out| + ...)

Routing itself is compared exactly (same expert ids, `check_routing`): the
selection keys are exact (the logits, whose top-k is the top-k of the scores;
with a correction bias the float32 fl32(score) + bias that layer and reference
compute alike, and group sums of two of them: harness/moe/routing.py), equal
keys go to the lowest index, and the problem strategy draws logits on a 1/4
grid or +-1e4 and biases on a 1/32 grid, so no float32 rounding can reorder
distinct logits that the selection depends on. Group selection is exact.

`stage_bounds` returns the intermediate bounds; the term functions
(gemm_bound, bias_bound, activation_bound, sum_bound, routing_weight_tolerance,
input_interval, OUTPUT_U) are what harness/testing/checks/stages.py holds each
float32 step of the layer to on its own inputs.

Measured (soak, 3000 problems per scheme, 24000 in all, before the families'
features): 0 failures, largest error/tolerance 0.49997 -- the flip term at
work: a ratio of 1/2 is a flipped a2 code that the interval allowed. With the
flip term removed (the layer's a2 assumed equal to the reference's), 10 of
3200 problems (0.3%) fail: with the ci profile's 480 examples per run, a red
run more often than not. With the features drawn (every routing row, biases,
shared MLP): 600 problems (nvfp4, w_mxfp4_a_fp8), 0 failures, largest 0.498.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

import harness.formats as hf
from harness.formats import minifloat, scales
from harness.formats.spec import U32

from harness.moe import reference as ref
from harness.schemes import PER_TENSOR_FORMATS

F32, F64 = torch.float32, torch.float64
U = U32  # float32 unit roundoff


def gamma(n: int) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of an n-term float32 sum."""
    return n * U / (1 - n * U)


def _f32_down(v: torch.Tensor) -> torch.Tensor:
    f = v.to(F32)
    return torch.where(f.double() > v, torch.nextafter(f, torch.full_like(f, -math.inf)), f)


def _f32_up(v: torch.Tensor) -> torch.Tensor:
    f = v.to(F32)
    return torch.where(f.double() < v, torch.nextafter(f, torch.full_like(f, math.inf)), f)


_MAX_CANDIDATES = 4


def _mx_interval(c, d, spec, mode):
    P, K = c.shape
    B = spec.block_size
    cb, db = c.reshape(P, K // B, B), d.reshape(P, K // B, B)
    lo_in, hi_in = _f32_down(cb - db), _f32_up(cb + db)
    amax_lo = _f32_down(torch.clamp(cb.abs() - db, min=0)).amax(-1)
    amax_hi = _f32_up(cb.abs() + db).amax(-1)
    b_lo = scales.mx_scale_byte(amax_lo, spec, mode).long()
    b_hi = scales.mx_scale_byte(amax_hi, spec, mode).long()
    lo = torch.full_like(cb, math.inf, dtype=F32)
    hi = torch.full_like(cb, -math.inf, dtype=F32)
    for i in range(_MAX_CANDIDATES):
        b = torch.minimum(b_lo + i, b_hi)
        sc, inv = scales.e8m0_to_float(b).unsqueeze(-1), scales.e8m0_inverse(b).unsqueeze(-1)
        for v in (lo_in, hi_in):
            q = minifloat.decode(spec.element, minifloat.encode(spec.element, v * inv, "rne")) * sc
            lo, hi = torch.minimum(lo, q), torch.maximum(hi, q)
    coarse = (b_hi - b_lo >= _MAX_CANDIDATES).unsqueeze(-1)
    m = (scales.e8m0_to_float(b_hi) * spec.max_normal).unsqueeze(-1).expand_as(lo)
    lo, hi = torch.where(coarse, -m, lo), torch.where(coarse, m, hi)
    return lo.reshape(P, K).double(), hi.reshape(P, K).double()


def _two_level_interval(c, d, gs, spec):
    P, K = c.shape
    B = spec.block_size
    gs = torch.as_tensor(gs).cpu().to(F32).reshape(())
    cb, db = c.reshape(P, K // B, B), d.reshape(P, K // B, B)
    lo_in, hi_in = _f32_down(cb - db), _f32_up(cb + db)
    amax_lo = _f32_down(torch.clamp(cb.abs() - db, min=0)).amax(-1, keepdim=True)
    amax_hi = _f32_up(cb.abs() + db).amax(-1, keepdim=True)

    def scode(a):
        return scales.block_scale_encode(spec, torch.clamp(gs * (a * spec.inv_elem_max), -spec.scale_max,
                                                           spec.scale_max)).long()

    c_lo, c_hi = scode(amax_lo), scode(amax_hi)
    lo = torch.full_like(cb, math.inf, dtype=F32)
    hi = torch.full_like(cb, -math.inf, dtype=F32)
    for i in range(_MAX_CANDIDATES):
        code = torch.minimum(c_lo + i, c_hi)
        s = scales.block_scale_decode(spec, code.to(torch.uint8))
        r = gs / s
        for v in (lo_in, hi_in):
            y = torch.clamp(v * r, -spec.elem_max, spec.elem_max)
            q = minifloat.decode(spec.element, minifloat.encode(spec.element, y, "rne")) * (s / gs)
            q = torch.where(s == 0, torch.zeros_like(q), q)
            lo, hi = torch.minimum(lo, q), torch.maximum(hi, q)
    coarse = c_hi - c_lo >= _MAX_CANDIDATES
    m = (spec.elem_max * scales.block_scale_decode(spec, c_hi.to(torch.uint8)) / gs).expand_as(lo)
    lo, hi = torch.where(coarse, -m, lo), torch.where(coarse, m, hi)
    return lo.reshape(P, K).double(), hi.reshape(P, K).double()


def _per_tensor_interval(c, d, scale, el):
    """The per-tensor QDQ interval; `el` is the row's element codec (E4M3FN for "fp8")."""
    lo_in, hi_in = _f32_down(c - d), _f32_up(c + d)
    if scale is not None:
        cands = [torch.as_tensor(scale).cpu().to(F32).reshape(())]
    elif c.numel() == 0:
        return c.clone(), c.clone()
    else:
        amax_lo = _f32_down(torch.clamp(c.abs() - d, min=0)).amax()
        amax_hi = _f32_up(c.abs() + d).amax()
        s_lo = torch.where(amax_lo > 0, amax_lo / el.max_normal, torch.ones_like(amax_lo))
        s_hi = torch.where(amax_hi > 0, amax_hi / el.max_normal, torch.ones_like(amax_hi))
        s_lo, s_hi = torch.minimum(s_lo, s_hi), torch.maximum(s_lo, s_hi)
        cands, s = [], s_lo
        while bool(s <= s_hi) and len(cands) <= 8:
            cands.append(s)
            s = torch.nextafter(s, torch.tensor(math.inf))
        if len(cands) > 8:  # coarse: half a code step (2^-(mbits+1) relative, half the subnormal step absolute)
            err = (lo_in.abs().maximum(hi_in.abs()).double() * 2.0 ** -(el.mbits + 1)
                   + 0.5 * el.min_subnormal * float(s_hi))
            return lo_in.double() - err, hi_in.double() + err
    lo = torch.full_like(c, math.inf, dtype=F32)
    hi = torch.full_like(c, -math.inf, dtype=F32)
    for s in cands:
        for v in (lo_in, hi_in):
            q = minifloat.decode(el, minifloat.encode(el, v / s, "rne")) * s
            lo, hi = torch.minimum(lo, q), torch.maximum(hi, q)
    return lo.double(), hi.double()


def qdq_interval(center: torch.Tensor, delta: torch.Tensor, scheme, cfg, which: str = "a2"):
    """[lo, hi] (float64) holding the QDQ output of EVERY float32 input within
    `delta` of `center` (elementwise), under the scheme's activation format."""
    scheme = ref.resolve_scheme(scheme)
    act = scheme.act_fmt
    if act is None:
        return center - delta, center + delta
    if center.numel() == 0:
        return center.clone(), center.clone()
    if scheme.act_per_tensor:
        return _per_tensor_interval(center, delta, getattr(cfg, f"{which}_scale"),
                                    getattr(hf, PER_TENSOR_FORMATS[act].element))
    spec = hf.FORMATS[act]
    if spec.has_global_scale:
        return _two_level_interval(center, delta, getattr(cfg, f"{which}_gscale"), spec)
    return _mx_interval(center, delta, spec, scheme.scale_mode)


WEIGHT_FLOOR = 2.0**-140  # routing weights below float32's normal range: absolute (term 6)
# The named terms of the bound (module docstring); output_tolerance(scale={name: f})
# multiplies one by f (0 drops it) -- the witness tests show each one needed.
TERMS = (
    "gemm1",  # float32 GEMM1 rounding (+ c_prec): gamma_H |a1| |W13|
    "bias_rounding",  # the float32 bias additions after each GEMM: u |h|, u |y|
    "activation",  # float32 activation evaluation and the reference's fl32(g)
    "qdq1_flip",  # QDQ #1 outputs reachable from its input interval (router weight on input)
    "input_weight",  # the layer's float32 routing weight on the input: the QDQ #1 input interval
    "qdq2_flip",  # QDQ #2 outputs reachable from its input interval
    "gemm2",  # float32 GEMM2 rounding (+ c_prec): gamma_I |W2| |a2|
    "routing_weights",  # float32 scores, renormalization, routed scaling: (2E + 2k + 18 + s) u relative
    "sum",  # float32 top-k sum gamma_(k+1), and the routed + shared addition
    "output_cast",  # the cast to the output dtype
    "second_order",  # the factor 2 over the first-order bound
)


def routing_weight_tolerance(weights: torch.Tensor, n_experts: int, spread: torch.Tensor) -> torch.Tensor:
    """Elementwise bound on |float32 routing weight - float64 reference weight|
    (softmax/sigmoid + renormalize in float32: (2E + 2k + 16) u relative; the
    routed scaling's float32 multiply: 2u more; the softmax's rounded exp
    arguments: spread u more, spread = ref.exp_argument_spread of the same
    [T, k]; 2^-140 absolute below float32's normal range)."""
    k = weights.shape[-1]
    if tuple(spread.shape) != tuple(weights.shape):
        raise ValueError(f"spread {tuple(spread.shape)} must have the weights' shape {tuple(weights.shape)}")
    return (2 * n_experts + 2 * k + 18 + spread.double()) * U * weights.abs() + WEIGHT_FLOOR


def _per_expert_abs_gemm(x_abs, rows_expert, w_abs):
    """[P, N]: x_abs[p] @ w_abs[e_p].T grouped by expert."""
    P = x_abs.shape[0]
    out = torch.zeros(P, w_abs.shape[1], dtype=F64)
    for e in range(w_abs.shape[0]):
        rows = (rows_expert == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            out[rows] = x_abs[rows] @ w_abs[e].T
    return out


def gemm_bound(x_abs: torch.Tensor, e_of: torch.Tensor, w_abs: torch.Tensor, c_prec: float = 0.0,
               factor: float = 1.0) -> torch.Tensor:
    """Term "gemm1"/"gemm2": (gamma_K + c_prec) |x| |W_e|^T per pair, the
    float32 rounding of a K-term dot product in any order (K = w.shape[2])."""
    return (factor * (gamma(w_abs.shape[2]) + c_prec)) * _per_expert_abs_gemm(x_abs, e_of, w_abs)


def bias_bound(v_abs: torch.Tensor, factor: float = 1.0) -> torch.Tensor:
    """Term "bias_rounding": the float32 addition of a bias to a GEMM result
    whose magnitude is at most v_abs rounds by at most u v_abs."""
    return factor * U * v_abs


def activation_bound(h: torch.Tensor, dh: torch.Tensor, g: torch.Tensor, activation: str,
                     factor: float = 1.0) -> torch.Tensor:
    """dg: |layer's activation output - fl32(g)| for a layer input within dh of
    h (float64 [P, 2I], gate then up). The propagation of dh (Lipschitz 1.1
    for silu and x sigmoid(1.702 x), clamps 1-Lipschitz, the product with up)
    plus, times `factor`, term "activation": the float32 evaluation (c u
    relative, c = 8 silu, 12 + 2 |1.702 gate| swiglu: the rounded sigmoid
    argument; |gate| 2^-126 absolute where float32 sigmoid underflows to 0)
    and the reference's own fl32(g)."""
    I = h.shape[-1] // 2
    gate, up = h[:, :I], h[:, I:]
    dgate, dup = dh[:, :I], dh[:, I:]
    if activation == "silu":
        gc = gate
        s = gate * torch.sigmoid(gate)
        upm, c = up.abs() + dup, 8
    else:
        gc = torch.clamp(gate, max=ref.SWIGLU_LIMIT)
        s = gc * torch.sigmoid(ref.SWIGLU_ALPHA * gc)
        upm = (torch.clamp(up, -ref.SWIGLU_LIMIT, ref.SWIGLU_LIMIT) + 1).abs() + dup
        # sigmoid's argument fl32(fl32(1.702) * gate) is off by 2u relative: sigmoid(x) then moves by
        # up to 2u |x| relative (d log sigmoid / dx <= 1), large for very negative gates
        c = 12 + 2 * (ref.SWIGLU_ALPHA * gc).abs()
    a = factor
    # float32 sigmoid is 0 below -88.7 (exp overflows): absolute error <= |gate| 2^-126 in s
    ds = 1.1 * dgate + a * (c * U * (s.abs() + 1.1 * dgate) + gc.abs() * 2.0**-126)
    return 2 * (ds * upm + s.abs() * dup + a * 2 * U * g.abs()) + a * U * g.abs() + 2.0**-149


def sum_bound(w: torch.Tensor, dw: torch.Tensor, ym: torch.Tensor, factor: float = 1.0) -> torch.Tensor:
    """Term "sum": the float32 top-k sum sum_j w_j y_j ([T, k, *] operands):
    gamma_(k+1) sum_j (|w_j| + dw_j) (|y_j| + dy_j)."""
    return factor * gamma(w.shape[1] + 1) * ((w.abs() + dw) * ym).sum(1)


OUTPUT_U = {F32: 0.0, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}  # float32 -> float32 is exact


def _pass_bound(tr: ref.ReferenceTrace, cfg, activation: str, c_prec: float, sc: dict, din=None) -> dict:
    """The stage bounds of one experts pass (routed experts or the shared MLP)
    from its QDQ #1 input interval (din: half-width around tr.a1_in, None =
    exact): a1 interval (a1_lo, a1_hi), dh [P, 2I] (GEMM1 output, bias
    included), dg [P, I] (the QDQ #2 input), a2 interval (a2_lo, a2_hi),
    dy [P, H] (GEMM2 output, bias included)."""
    T, k = tr.ids.shape
    P = T * k
    tok = torch.arange(T).repeat_interleave(k)
    e_of = tr.ids.reshape(P)
    scheme = ref.resolve_scheme(cfg.scheme)
    a1m, da1 = tr.a1.abs(), torch.zeros_like(tr.a1)
    lo1 = hi1 = tr.a1
    if din is not None:
        c1 = tr.a1_in.double()
        lo1, hi1 = qdq_interval(c1, sc["input_weight"] * din, scheme, cfg, "a1")
        if scheme.act_fmt is not None and not sc["qdq1_flip"]:
            lo1 = hi1 = tr.a1  # the layer's a1 codes assumed equal to the reference's
        da1 = torch.maximum(hi1 - tr.a1, tr.a1 - lo1)
        a1m = torch.maximum(lo1.abs(), hi1.abs())
    w13a = tr.w13.abs()
    dh = gemm_bound(a1m[tok], e_of, w13a, c_prec, sc["gemm1"]) + _per_expert_abs_gemm(da1[tok], e_of, w13a)
    if tr.b13 is not None:
        dh = dh + bias_bound(tr.h.abs() + dh, sc["bias_rounding"])
    g = tr.g
    dg = activation_bound(tr.h, dh, g, activation, sc["activation"])
    if scheme.act_fmt is not None and not sc["qdq2_flip"]:
        lo = hi = tr.a2  # the layer's a2 codes assumed equal to the reference's
    else:
        lo, hi = qdq_interval(g, dg, scheme, cfg, "a2")
    da2 = torch.maximum(hi - tr.a2, tr.a2 - lo)
    a2m = torch.maximum(lo.abs(), hi.abs())
    w2a = tr.w2.abs()
    dy = _per_expert_abs_gemm(da2, e_of, w2a) + gemm_bound(a2m, e_of, w2a, c_prec, sc["gemm2"])
    if tr.b2 is not None:
        dy = dy + bias_bound(tr.y.abs() + dy, sc["bias_rounding"])
    return {"a1_lo": lo1, "a1_hi": hi1, "dh": dh, "dg": dg, "a2_lo": lo, "a2_hi": hi, "dy": dy}


def term_scales(scale: Optional[dict]) -> dict:
    """{term: factor} for every name of TERMS (1 unless `scale` says otherwise)."""
    sc = {name: 1.0 for name in TERMS}
    for name, f in (scale or {}).items():
        if name not in sc:
            raise ValueError(f"unknown tolerance term {name!r}; terms: {', '.join(TERMS)}")
        sc[name] = float(f)
    return sc


def _spread(trace: ref.ReferenceTrace) -> torch.Tensor:
    """The trace's exp-argument spread (zeros where it has none: weights of exactly 1)."""
    return trace.spread if trace.spread is not None else torch.zeros_like(trace.weights)


def input_interval(trace: ref.ReferenceTrace, sc: dict):
    """(din [T, H] or None, combine weights |w| [T,k,1], their bound dw [T,k,1])."""
    T, k = trace.ids.shape
    E = trace.w13.shape[0]
    w = trace.weights.abs().reshape(T, k, 1)
    dw = sc["routing_weights"] * routing_weight_tolerance(trace.weights, E, _spread(trace)).reshape(T, k, 1)
    arch = trace.arch
    if arch is None or not arch.router_weight_on_input:
        return None, w, dw
    # layer: fl32(x * w32), reference: fl32(x * fl32(w)); |w32 - fl32(w)| <= dw + u|w|
    x = trace.a1_in.double().abs() / torch.clamp(trace.weights.abs(), min=2.0**-1000)
    x = torch.where(trace.weights.abs() > 0, x, trace.a1_in.double().abs())
    din = x * (dw.reshape(T, 1) + 3 * U * w.reshape(T, 1))
    return din, torch.ones_like(w), torch.zeros_like(dw)  # the output sum has weight 1


def stage_bounds(trace: ref.ReferenceTrace, cfg, *, activation: Optional[str] = None, c_prec: float = 0.0,
                 shared_config=None, scale: Optional[dict] = None) -> dict:
    """The intermediate bounds of the derivation (_pass_bound's keys), for the
    routed pass and, under "shared", the shared MLP's pass: what a stage-by-
    stage comparison of the layer's trace seam holds it to."""
    sc = term_scales(scale)
    act = activation or (trace.arch.activation if trace.arch is not None else "silu")
    din, _, _ = input_interval(trace, sc)
    out = _pass_bound(trace, cfg, act, c_prec, sc, din)
    if trace.shared is not None:
        scfg = shared_config if shared_config is not None else trace.shared.config
        out["shared"] = _pass_bound(trace.shared, scfg, act, c_prec, sc)
    return out


def output_tolerance(trace: ref.ReferenceTrace, cfg, *, activation: Optional[str] = None, out_dtype=F32,
                     c_prec: float = 0.0, shared_config=None, scale: Optional[dict] = None) -> torch.Tensor:
    """Elementwise tolerance [T, H] of |layer - reference| (module docstring).
    `cfg`: the layer's MoEQuantConfig (its scheme and activation scales);
    `shared_config`: the shared MLP's (trace.shared present); the architecture
    is the trace's row. `out_dtype`: the dtype the layer returns. `c_prec`:
    extra relative GEMM error of a reduced-precision GEMM (the fused kernel's
    documented c_prec; 0 for float32 "ieee" GEMMs). `scale`: {term: factor}
    over TERMS (0 drops a term; the witness tests)."""
    sc = term_scales(scale)
    arch = trace.arch
    act = activation or (arch.activation if arch is not None else "silu")
    T, k = trace.ids.shape
    E, I2, H = trace.w13.shape
    if T == 0:
        return torch.zeros(T, H, dtype=F64)
    din, w, dw = input_interval(trace, sc)
    b = _pass_bound(trace, cfg, act, c_prec, sc, din)
    dy = b["dy"].reshape(T, k, H)
    ym = trace.y.abs().reshape(T, k, H) + dy
    bound = (w * dy + dw * ym).sum(1) + sum_bound(w, dw, ym, sc["sum"])
    if trace.shared is not None:
        shared_config = shared_config if shared_config is not None else trace.shared.config
        if shared_config is None:
            raise ValueError("the trace has a shared MLP pass: output_tolerance needs its shared_config")
        dys = _pass_bound(trace.shared, shared_config, act, c_prec, sc)["dy"]
        yms = trace.shared.y.abs() + dys
        routed_m = (trace.routed.abs() if trace.routed is not None else trace.out.abs()) + bound
        bound = bound + dys + sc["sum"] * U * (routed_m + yms)
    u_out = OUTPUT_U[out_dtype]
    bound = bound + sc["output_cast"] * u_out * (trace.out.abs() + bound)
    return (1 + sc["second_order"]) * bound + 2.0**-140
