"""Derived tolerance of the emulated MoE layer against the float64 reference
(harness.moe.reference): the one tolerance model used by `moe-harness run`,
the property suites and the lm-eval oracle gate.

u = 2^-24 (float32 unit roundoff), gamma_n = n u / (1 - n u).

1. QDQ #1 (a1): the layer and the reference quantize the SAME float32 tensor
   (hidden.float()) with the same spec, and the dequantized expert weights are
   the same float32 values (both bit-identical to hf.dequantize by contract).
   So the GEMM inputs agree exactly and contribute no error term.
2. GEMM1 in float32 (any summation order): |h_L - h| <= dh = gamma_H |a1| |W13_e|^T
   (standard dot-product bound, products rounded too).
3. Activation in float32: silu(x) = x sigmoid(x) and x sigmoid(1.702 x) have
   |d/dx| <= 1.1; clamps are 1-Lipschitz; their float32 evaluation adds <= c u
   relative (c = 8 silu, 12 swiglu). With s = act(gate):
   dg = (1.1 dgate + c u (|s| + 1.1 dgate)) (|up'| + dup) + |s| dup + 2u|g|,
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
   term is exactly the flip. da2 = max(hi - a2, a2 - lo).
5. GEMM2: dy = |W2_e| da2 + gamma_I |W2_e| max(|lo|, |hi|).
6. Routing weights (float32 softmax/sigmoid + renormalize): relative error
   <= (2E + 2k + 16) u; weighted sum over k (float32): gamma_(k+1); output
   cast to hidden's dtype: u_out |out|.
   tol = 2 * (sum_j |w_j| dy_j + dw_j (|y_j| + dy_j) + gamma_(k+1) sum_j (|w_j| + dw_j)(|y_j| + dy_j) + u_out |out|) + 2^-140

Routing itself is compared exactly (same expert ids, `check_routing`): the
top-k of the scores is the top-k of the exact logits (softmax and sigmoid are
strictly increasing), equal logits go to the lowest index, and the problem
strategy draws logits on a 1/4 grid or +-1e4, so no float32 rounding can
reorder distinct logits that the selection depends on.

Measured (soak, 3000 problems per scheme, 24000 in all): 0 failures, largest
error/tolerance 0.49997 -- the flip term at work: a ratio of 1/2 is a flipped
a2 code that the interval allowed. With the flip term removed (the layer's a2
assumed equal to the reference's), 10 of 3200 problems (0.3%) fail: with the
ci profile's 480 examples per run, a red run more often than not.
"""
from __future__ import annotations

import math

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


def routing_weight_tolerance(weights: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Elementwise bound on |float32 routing weight - float64 reference weight|
    (softmax/sigmoid + renormalize in float32: (2E + 2k + 16) u relative)."""
    k = weights.shape[-1]
    return (2 * n_experts + 2 * k + 16) * U * weights.abs()


def _per_expert_abs_gemm(x_abs, rows_expert, w_abs):
    """[P, N]: x_abs[p] @ w_abs[e_p].T grouped by expert."""
    P = x_abs.shape[0]
    out = torch.zeros(P, w_abs.shape[1], dtype=F64)
    for e in range(w_abs.shape[0]):
        rows = (rows_expert == e).nonzero(as_tuple=True)[0]
        if rows.numel():
            out[rows] = x_abs[rows] @ w_abs[e].T
    return out


def output_tolerance(trace: ref.ReferenceTrace, cfg, *, activation: str, out_dtype=F32,
                     c_prec: float = 0.0) -> torch.Tensor:
    """Elementwise tolerance [T, H] of |layer - reference| (module docstring).
    `cfg`: the layer's MoEQuantConfig (its scheme and activation scales).
    `c_prec`: extra relative GEMM error of a reduced-precision GEMM (the fused
    kernel's documented c_prec; 0 for float32 "ieee" GEMMs)."""
    T, k = trace.ids.shape
    E, I2, H = trace.w13.shape
    I = I2 // 2
    P = T * k
    if P == 0:
        return torch.zeros(T, H, dtype=F64)
    tok = torch.arange(T).repeat_interleave(k)
    e_of = trace.ids.reshape(P)
    dh = (gamma(H) + c_prec) * _per_expert_abs_gemm(trace.a1.abs()[tok], e_of, trace.w13.abs())
    gate, up = trace.h[:, :I], trace.h[:, I:]
    dgate, dup = dh[:, :I], dh[:, I:]
    if activation == "silu":
        s = gate * torch.sigmoid(gate)
        upm, c = up.abs() + dup, 8
    else:
        gc = torch.clamp(gate, max=ref.SWIGLU_LIMIT)
        s = gc * torch.sigmoid(ref.SWIGLU_ALPHA * gc)
        upm, c = (torch.clamp(up, -ref.SWIGLU_LIMIT, ref.SWIGLU_LIMIT) + 1).abs() + dup, 12
    ds = 1.1 * dgate + c * U * (s.abs() + 1.1 * dgate)
    g = trace.g
    dg = 2 * (ds * upm + s.abs() * dup + 2 * U * g.abs()) + U * g.abs() + 2.0**-149
    lo, hi = qdq_interval(g, dg, cfg.scheme, cfg, "a2")
    da2 = torch.maximum(hi - trace.a2, trace.a2 - lo)
    a2m = torch.maximum(lo.abs(), hi.abs())
    w2a = trace.w2.abs()
    dy = _per_expert_abs_gemm(da2, e_of, w2a) + (gamma(I) + c_prec) * _per_expert_abs_gemm(a2m, e_of, w2a)
    w = trace.weights.abs().reshape(T, k, 1)
    dw = routing_weight_tolerance(trace.weights, E).reshape(T, k, 1)
    ym = trace.y.abs().reshape(T, k, H) + dy.reshape(T, k, H)
    bound = (w * dy.reshape(T, k, H) + dw * ym).sum(1) + gamma(k + 1) * ((w + dw) * ym).sum(1)
    u_out = {F32: U, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[out_dtype]
    bound = bound + u_out * (trace.out.abs() + bound)
    return 2 * bound + 2.0**-140
