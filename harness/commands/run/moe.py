"""MoE checks for `moe-harness run`: one seeded sample problem per scheme and
backend, the layer held against the float64 oracle harness.moe.reference with
the same derived tolerance the property suites use (harness/moe/tolerance.py).

Per check (the layer's trace seam gives its intermediates):
  a1      the layer's QDQ #1 output equals the reference's bitwise;
  a2      the reference quantizer applied to the layer's own a2 input gives the
          layer's a2 bitwise (flips against the reference's a2, caused by
          GEMM1 rounding at a quantization boundary, are counted, not failed:
          the tolerance allows exactly the QDQ outputs such rounding reaches);
  output  |out - ref| <= output_tolerance (float32 GEMM bounds in any summation
          order, activation and routing-weight rounding, every reachable a2
          flip, the output cast; c_prec for the fused kernel's GEMM precision).
err_vs_bound = max |out - ref| / tolerance (<= 1 passes); sqnr_db_vs_ref is
reported, not gated (the tolerance is the derived criterion).
"""
from __future__ import annotations

import math

import torch

from harness.kernels import fused_gemm as _fused
from harness.moe.layer import build_emulated_moe, calibrate_activation_scales
from harness.moe.routing import route
from harness.moe.schemes import SCHEME_NAMES, get_scheme
from harness.moe.tolerance import output_tolerance
from harness.moe import reference
from harness.schemes import EXPERT_BACKENDS

BACKENDS = EXPERT_BACKENDS
F64 = torch.float64


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
    s = get_scheme(scheme)
    (w13, w2, x, lg), opts = _problem(seed, index, device)
    a1g, a2g = calibrate_activation_scales(w13, w2, x, lg, top_k=opts["top_k"], renormalize=opts["renormalize"],
                                           scoring=opts["scoring"], activation=opts["activation"])
    moe = build_emulated_moe(s, w13, w2, a1_gscale=a1g, a2_gscale=a2g, backend=backend, **opts)
    moe.experts.trace = tr = {}
    with torch.no_grad():
        out = moe(x, lg)
    moe.experts.trace = None
    _, ids = route(lg, opts["top_k"], scoring=opts["scoring"], renormalize=opts["renormalize"])
    qc = moe.quant_config
    ref = reference.reference_moe_trace(x, lg, qc, **opts)
    routing_same = torch.equal(ids.cpu(), ref.ids)
    c = _fused.c_prec(s, _fused.resolve_precision(moe.experts.fused_precision, s, device)) if backend == "fused" else 0.0

    a1_exact = torch.equal(tr["a1"].cpu().to(F64), ref.a1)
    requant = reference.qdq_activation(tr["a2_in"].cpu().float(), s, scale=getattr(qc, "a2_scale", None),
                                       gscale=getattr(qc, "a2_gscale", None), which="a2")
    a2_consistent = torch.equal(requant, tr["a2"].cpu())
    flips = int((tr["a2"].cpu().to(F64) != ref.a2).sum())

    tol = output_tolerance(ref, qc, activation=opts["activation"], out_dtype=out.dtype, c_prec=c)
    err = (out.cpu().to(F64) - ref.out).abs()
    err_vs_bound = float((err / tol).max()) if err.numel() else 0.0
    noise = float((err ** 2).sum())
    sqnr = math.inf if noise == 0 else 10 * math.log10(float((ref.out ** 2).sum()) / noise)
    passed = routing_same and a1_exact and a2_consistent and err_vs_bound <= 1.0
    return {
        "name": f"moe.{s.name}.{backend}",
        "passed": bool(passed),
        "details": {
            "err_vs_bound": err_vs_bound,
            "max_abs_err": float(err.max()) if err.numel() else 0.0,
            "sqnr_db_vs_ref": sqnr if math.isfinite(sqnr) else 999.0,
            "routing_same": routing_same,
            "a1_bitwise": a1_exact,
            "a2_requant_bitwise": a2_consistent,
            "a2_elems_differ_vs_ref": flips,
            "c_prec": c,
            **{k2: v for k2, v in opts.items() if k2 != "top_k"},
        },
    }


def iter_checks(seed: int, device, backends=BACKENDS):
    """The checks one by one, each yielded as soon as it finishes."""
    device = torch.device(device)
    for i, scheme in enumerate(SCHEME_NAMES):
        for backend in backends:
            try:
                yield (check_scheme(scheme, backend, seed, device, index=i))
            except Exception as exc:  # a crash is a failed check with its reason, not a dead run
                yield ({"name": f"moe.{scheme}.{backend}", "passed": False,
                                "details": {"error": f"{type(exc).__name__}: {exc}"}})


def run_checks(seed: int, device, backends=BACKENDS) -> list[dict]:
    return list(iter_checks(seed=seed, device=device, backends=backends))
