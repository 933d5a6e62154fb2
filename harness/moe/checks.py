"""MoE checks for `moe-harness run`: one seeded sample problem per scheme and
backend, the layer held against the float64 oracle harness.moe.reference.

Per check, stage by stage (the layer's trace seam gives its intermediates):
  a1      the layer's QDQ #1 output equals the reference's bitwise;
  GEMM1   |h - h_ref| <= (gamma_H + u + c) * (|a1| @ |W13_e|^T)      (c: fused.c_prec)
  a2      the reference quantizer applied to the layer's own a2 input gives the
          layer's a2 bitwise (flips against the reference's a2, caused by
          GEMM1 rounding at a quantization boundary, are counted, not failed);
  output  |out - sum_j w_tj a2_j @ W2_e^T| <= sum_j w_tj (gamma_I + u + c)
          (|a2_j| @ |W2_e|^T) + (k + 6) u sum_j w_tj |y_j|
details: max_abs_err and sqnr_db_vs_ref against the reference's own output;
err_vs_bound = the largest (error / bound) of the two GEMM stages (<= 1 passes).
"""
from __future__ import annotations

import math

import torch

from . import fused as _fused
from .layer import build_emulated_moe, calibrate_activation_scales
from .routing import route
from .schemes import SCHEME_NAMES, get_scheme

U = 2.0 ** -24
SQNR_FLOOR_DB = 30.0
BACKENDS = ("unfused", "fused")
F64 = torch.float64


def _gamma(n: int) -> float:
    return n * U / (1 - n * U)


def _grouped_abs(x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """|x_p| @ |W_{ids[p]}|^T in float64 ([P, K] x [E, N, K] -> [P, N])."""
    out = torch.zeros(x.shape[0], w.shape[1], dtype=F64)
    ax, aw = x.abs().to(F64), w.abs().to(F64)
    for e in range(w.shape[0]):
        m = ids == e
        if bool(m.any()):
            out[m] = ax[m] @ aw[e].T
    return out


def _problem(seed: int, index: int, device):
    g = torch.Generator().manual_seed(seed * 1009 + index)
    E, H, I, T, k = 4, 64, 64, 8, 2
    w13 = torch.randn(E, 2 * I, H, generator=g) * 0.2
    w2 = torch.randn(E, H, I, generator=g) * 0.2
    x = torch.randn(T, H, generator=g)
    lg = torch.randn(T, E, generator=g) * 2
    opts = dict(top_k=k, renormalize=index % 2 == 0, scoring="sigmoid" if index % 3 == 2 else "softmax",
                activation="swiglu_clamp" if index % 4 == 3 else "silu")
    return [t.to(device) for t in (w13, w2, x, lg)], opts


def check_scheme(scheme: str, backend: str, seed: int, device, index: int = 0) -> dict:
    from . import reference  # noqa: PLC0415  (written by the suites author; loaded lazily)

    s = get_scheme(scheme)
    (w13, w2, x, lg), opts = _problem(seed, index, device)
    a1g, a2g = calibrate_activation_scales(w13, w2, x, lg, top_k=opts["top_k"], renormalize=opts["renormalize"],
                                           scoring=opts["scoring"], activation=opts["activation"])
    moe = build_emulated_moe(s, w13, w2, a1_gscale=a1g, a2_gscale=a2g, backend=backend, **opts)
    moe.experts.trace = tr = {}
    with torch.no_grad():
        out = moe(x, lg).cpu().to(F64)
    moe.experts.trace = None
    _, ids = route(lg, opts["top_k"], scoring=opts["scoring"], renormalize=opts["renormalize"])
    ids = ids.cpu()
    qc = moe.quant_config
    ref = reference.reference_moe_trace(x, lg, qc, topk_ids=ids, **opts)
    flat = ids.reshape(-1)
    k = opts["top_k"]
    c = _fused.c_prec(s, _fused.resolve_precision(moe.experts.fused_precision, s, device)) if backend == "fused" else 0.0
    H, I = x.shape[1], w2.shape[2]

    a1 = tr["a1"].cpu()
    a1_exact = torch.equal(a1.to(F64), ref.a1)
    b1 = (_gamma(H) + U + c) * _grouped_abs(a1.repeat_interleave(k, 0), flat, ref.w13)
    r1 = float(((tr["h1"].cpu().to(F64) - ref.h).abs() / b1.clamp_min(1e-300)).max()) if b1.numel() else 0.0

    a2_layer = tr["a2"].cpu()
    requant = reference.qdq_activation(tr["a2_in"].cpu().float(), s, scale=getattr(qc, "a2_scale", None),
                                       gscale=getattr(qc, "a2_gscale", None), which="a2")
    a2_consistent = torch.equal(requant, a2_layer)
    flips = int((a2_layer.to(F64) != ref.a2).sum())

    y = torch.zeros(flat.shape[0], H, dtype=F64)
    for e in range(ref.w2.shape[0]):
        m = flat == e
        y[m] = a2_layer.to(F64)[m] @ ref.w2[e].T
    w = ref.weights.reshape(-1, k, 1)
    given = (w * y.reshape(-1, k, H)).sum(1)
    gemm2 = (_gamma(I) + U + c) * _grouped_abs(a2_layer, flat, ref.w2)
    b2 = (w * gemm2.reshape(-1, k, H)).sum(1) + (k + 6) * U * (w.abs() * y.abs().reshape(-1, k, H)).sum(1)
    r2 = float(((out - given).abs() / b2.clamp_min(1e-300)).max()) if b2.numel() else 0.0

    diff = out - ref.out
    noise = float((diff ** 2).sum())
    sqnr = math.inf if noise == 0 else 10 * math.log10(float((ref.out ** 2).sum()) / noise)
    err_vs_bound = max(r1, r2)
    passed = a1_exact and a2_consistent and err_vs_bound <= 1.0 and sqnr >= SQNR_FLOOR_DB
    return {
        "name": f"moe.{s.name}.{backend}",
        "passed": bool(passed),
        "details": {
            "max_abs_err": float(diff.abs().max()) if diff.numel() else 0.0,
            "err_vs_bound": err_vs_bound,
            "sqnr_db_vs_ref": sqnr if math.isfinite(sqnr) else 999.0,
            "a1_bitwise": a1_exact,
            "a2_requant_bitwise": a2_consistent,
            "a2_elems_differ_vs_ref": flips,
            "gemm1_err_vs_bound": r1,
            "gemm2_err_vs_bound": r2,
            **{k2: v for k2, v in opts.items() if k2 != "top_k"},
        },
    }


def run_checks(seed: int, device, backends=BACKENDS) -> list[dict]:
    device = torch.device(device)
    results = []
    for i, scheme in enumerate(SCHEME_NAMES):
        for backend in backends:
            try:
                results.append(check_scheme(scheme, backend, seed, device, index=i))
            except Exception as exc:  # a crash is a failed check with its reason, not a dead run
                results.append({"name": f"moe.{scheme}.{backend}", "passed": False,
                                "details": {"error": f"{type(exc).__name__}: {exc}"}})
    return results
