"""Generic MoE property checks, shared by the property suites (test_moe_*.py)
and the regression tests (suites/regressions/), which inject a historical bug
and assert that the SAME check detects it.

Every check raises AssertionError (with a readable message) when the property
fails and returns a small dict of measurements when it holds.

Tolerance against the float64 reference: harness/moe/tolerance.py (the derivation
is its docstring).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Optional

import torch

import harness.formats as hf
from harness.formats import minifloat, scales
from harness.moe import reference as ref
from harness.moe import tolerance as _tol

F32, F64 = torch.float32, torch.float64
U = _tol.U
gamma = _tol.gamma


def hm():
    import harness.moe as _hm

    return _hm


def quantize_input_module():
    import harness.moe.quantize_input as qi

    return qi


# =========================================================================== problem -> layer
@dataclasses.dataclass
class Truth:
    """Ground truth of a problem's quantized weights (before any loader)."""

    w13_q: hf.QuantizedTensor
    w2_q: hf.QuantizedTensor
    w13_gscale: Optional[torch.Tensor]
    w2_gscale: Optional[torch.Tensor]
    a1_gscale: Optional[torch.Tensor] = None
    a2_gscale: Optional[torch.Tensor] = None
    a1_scale: Optional[torch.Tensor] = None
    a2_scale: Optional[torch.Tensor] = None


def _dense_intermediate(t, activation: str) -> torch.Tensor:
    """float64 act(hidden @ w13[e].T) for every token and expert (calibration)."""
    h = torch.einsum("th,enh->ten", t.hidden.double(), t.w13.double())
    return ref.reference_activation(h, activation)


def truth_of(problem, t) -> Truth:
    scheme = ref.resolve_scheme(problem.scheme)
    if scheme.weight_fmt == "nvfp4":
        def qz(w):
            gs = hf.nvfp4_global_scale(w.abs().amax(dim=(1, 2)))
            return hf.quantize(w, "nvfp4", global_scale=gs.reshape(-1, 1)), gs
        w13_q, gs13 = qz(t.w13)
        w2_q, gs2 = qz(t.w2)
    else:
        w13_q = hf.quantize(t.w13, scheme.weight_fmt, scale_mode=scheme.scale_mode)
        w2_q = hf.quantize(t.w2, scheme.weight_fmt, scale_mode=scheme.scale_mode)
        gs13 = gs2 = None
    tr = Truth(w13_q, w2_q, gs13, gs2)
    if scheme.act_fmt in ("nvfp4", "fp8") and problem.act_scale:
        a1max = t.hidden.abs().amax().double() if t.hidden.numel() else torch.zeros((), dtype=F64)
        g = _dense_intermediate(t, problem.activation)
        a2max = g.abs().amax() if g.numel() else torch.zeros((), dtype=F64)
        if scheme.act_fmt == "nvfp4":
            def gsc(a):
                return (2688.0 / a * problem.act_scale if a > 0 else torch.ones((), dtype=F64)).to(F32)
            tr.a1_gscale, tr.a2_gscale = gsc(a1max), gsc(a2max)
        else:
            def dsc(a):
                return (a / 448.0 / problem.act_scale if a > 0 else torch.ones((), dtype=F64)).to(F32)
            tr.a1_scale, tr.a2_scale = dsc(a1max), dsc(a2max)
    return tr


def checkpoint_tensors(problem, t, truth: Truth) -> dict:
    """The problem's weights as a checkpoint dict in the problem's convention."""
    scheme = ref.resolve_scheme(problem.scheme)
    spec = hf.FORMATS[scheme.weight_fmt]

    def codes(q):
        return hf.pack_fp4(q.codes) if spec.is_fp4 else q.codes

    d = {"w13_weight": codes(truth.w13_q), "w2_weight": codes(truth.w2_q)}
    if scheme.weight_fmt != "nvfp4":
        d["w13_weight_scale"], d["w2_weight_scale"] = truth.w13_q.scales, truth.w2_q.scales
        return d
    d["w13_weight_scale"] = truth.w13_q.scales.view(torch.float8_e4m3fn)
    d["w2_weight_scale"] = truth.w2_q.scales.view(torch.float8_e4m3fn)
    E = truth.w13_gscale.shape[0]
    # Per-expert input scales whose max (decode side) / min (encode side) is the truth.
    spread = torch.linspace(1.0, 0.5, E, dtype=F64)[torch.randperm(E, generator=torch.Generator().manual_seed(problem.seed))]
    if problem.ckpt == "modelopt":
        d["w13_weight_scale_2"] = (1.0 / truth.w13_gscale.double()).to(F32)
        d["w2_weight_scale_2"] = (1.0 / truth.w2_gscale.double()).to(F32)
        if truth.a1_gscale is not None:
            d["w13_input_scale"] = (spread / truth.a1_gscale.double()).to(F32)
            d["w2_input_scale"] = (spread / truth.a2_gscale.double()).to(F32)
    elif problem.ckpt == "compressed_tensors":
        d["w13_weight_packed"] = d.pop("w13_weight")
        d["w2_weight_packed"] = d.pop("w2_weight")
        d["w13_weight_global_scale"] = truth.w13_gscale
        d["w2_weight_global_scale"] = truth.w2_gscale
        if truth.a1_gscale is not None:
            d["w13_input_global_scale"] = (truth.a1_gscale.double() / spread).to(F32)
            d["w2_input_global_scale"] = (truth.a2_gscale.double() / spread).to(F32)
    else:
        raise ValueError(f"unknown nvfp4 checkpoint convention {problem.ckpt!r}")
    return d


def load_config(problem, t, truth: Optional[Truth] = None, device="cpu"):
    """MoEQuantConfig through the checkpoint loader of the problem's convention
    (checkpoint tensors on `device`, so the config lives there)."""
    truth = truth or truth_of(problem, t)
    d = {k: v.to(device) for k, v in checkpoint_tensors(problem, t, truth).items()}
    scheme = ref.resolve_scheme(problem.scheme)
    if scheme.weight_fmt == "nvfp4":
        loader = hm().load_modelopt_nvfp4 if problem.ckpt == "modelopt" else hm().load_compressed_tensors_nvfp4
        cfg = loader(d)
    else:
        cfg = hm().load_ocp_mx(d, scheme=scheme.name)
        if truth.a1_scale is not None:
            cfg = dataclasses.replace(cfg, a1_scale=truth.a1_scale.to(device), a2_scale=truth.a2_scale.to(device))
    return cfg


def make_moe(problem, cfg, backend: str = "unfused", **kw):
    return hm().FusedMoE(hm().make_experts(cfg, backend=backend, **kw), top_k=problem.top_k,
                         renormalize=problem.renormalize, scoring=problem.scoring, activation=problem.activation)


def setup(problem, backend: str = "unfused", device="cpu"):
    """(tensors, truth, cfg, moe) for a problem; tensors and config on `device`."""
    t = problem.tensors()
    truth = truth_of(problem, t)
    cfg = load_config(problem, t, truth, device)
    if torch.device(device).type != "cpu":
        t = dataclasses.replace(t, **{f.name: getattr(t, f.name).to(device) for f in dataclasses.fields(t)})
    return t, truth, cfg, make_moe(problem, cfg, backend)


def run(moe, t) -> torch.Tensor:
    with torch.no_grad():
        return moe(t.hidden, t.router_logits)


# =========================================================================== reference + tolerance
# The tolerance model lives in the library (harness/moe/tolerance.py), so that
# `moe-harness run` and the lm-eval oracle gate use the same one.
qdq_interval = _tol.qdq_interval


def output_tolerance(trace: ref.ReferenceTrace, problem, cfg, out_dtype=F32, c_prec: float = 0.0) -> torch.Tensor:
    return _tol.output_tolerance(trace, cfg, activation=problem.activation, out_dtype=out_dtype, c_prec=c_prec)


def reference_trace(problem, t, cfg, **kw) -> ref.ReferenceTrace:
    return ref.reference_moe_trace(t.hidden, t.router_logits, cfg, top_k=problem.top_k,
                                   renormalize=problem.renormalize, scoring=problem.scoring,
                                   activation=problem.activation, **kw)


def _describe_mismatch(what, got, want, tol, bad):
    idx = torch.nonzero(bad)[:4].tolist()
    n = int(bad.sum())
    ex = [(i, float(got[tuple(i)]), float(want[tuple(i)]), float(tol[tuple(i)])) for i in idx]
    return f"{what}: {n} of {bad.numel()} elements outside tolerance; (index, layer, reference, tol): {ex}"


def check_routing(problem, t=None, trace=None):
    """The layer's routing (harness.moe.routing.route, float32) selects the same
    experts as the float64 reference (ties = equal logits -> lowest index) and
    its weights agree to (2E + 2k + 16) u relative."""
    if t is None:
        t = problem.tensors()
    if trace is None:
        w_ref, ids_ref = ref.reference_route(t.router_logits, problem.top_k, scoring=problem.scoring,
                                             renormalize=problem.renormalize)
    else:
        w_ref, ids_ref = trace.weights, trace.ids
    import harness.moe.routing as routing  # the module the layer calls through

    w32, ids = routing.route(t.router_logits, problem.top_k, scoring=problem.scoring, renormalize=problem.renormalize)
    if not torch.equal(ids.cpu().long(), ids_ref):
        rows = torch.nonzero((ids.cpu().long() != ids_ref).any(-1)).flatten()[:2].tolist()
        detail = "; ".join(f"token {r}: logits {t.router_logits[r].cpu().tolist()} layer {ids[r].tolist()} "
                           f"ref {ids_ref[r].tolist()}" for r in rows)
        raise AssertionError(f"routing differs from the reference (top-k of the logits, equal logits -> lowest "
                             f"index) in {int((ids.cpu().long() != ids_ref).any(-1).sum())} tokens: {detail}")
    dw = (2 * problem.E + 2 * problem.top_k + 16) * U * w_ref.abs() + 2.0**-140
    wbad = ~((w32.cpu().double() - w_ref).abs() <= dw)
    assert not bool(wbad.any()), (
        f"routing weights differ from the reference at {int(wbad.sum())} of {wbad.numel()} (token, slot): e.g. "
        f"{torch.nonzero(wbad)[:3].tolist()}: layer {w32.cpu()[wbad][:3].tolist()} vs ref {w_ref[wbad][:3].tolist()}")
    return {}


def check_matches_reference(problem, t=None, cfg=None, moe=None, out=None, c_prec: float = 0.0):
    """Layer output within the derived tolerance of the float64 reference, and
    the layer's routing equal to the reference routing."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    if out is None:
        out = run(moe, t)
    trace = reference_trace(problem, t, cfg)
    T, H = t.hidden.shape
    assert tuple(out.shape) == (T, H), f"output shape {tuple(out.shape)} != {(T, H)}"
    assert out.dtype == t.hidden.dtype, f"output dtype {out.dtype} != hidden dtype {t.hidden.dtype}"
    check_routing(problem, t, trace)
    tol = output_tolerance(trace, problem, cfg, out.dtype, c_prec)
    err = (out.detach().cpu().double() - trace.out).abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        raise AssertionError(_describe_mismatch(f"layer vs float64 reference ({problem!r})", out.cpu(), trace.out, tol, bad))
    ratio = float((err / tol).max()) if err.numel() else 0.0
    return {"max_err_over_tol": ratio}


# =========================================================================== fused vs unfused
def fused_c_prec(moe, device) -> float:
    """c_prec of the fused experts' resolved GEMM precision (harness/moe/fused.py
    contract (2)): 0 for "ieee" (always on CPU), 2^-7 for lossy bf16 operands."""
    from harness.kernels import fused_gemm as fused

    ex = moe.experts
    return fused.c_prec(ex.scheme, fused.resolve_precision(ex.fused_precision, ex.scheme, device))


def check_fused_matches_unfused(problem, t=None, cfg=None, device="cpu"):
    """Fused vs unfused per the fused kernel's documented contract: NOT bitwise
    (tl.dot sums in another order, even in the CPU interpreter), so BOTH must lie
    within the derived reference tolerance (the fused one widened by its c_prec),
    hence |fused - unfused| <= tol_fused + tol_unfused; the routing, the QDQ
    calls and the top-k sum are shared. If they happen to be bitwise equal the
    result says so."""
    if t is None:
        t, _, cfg, _ = setup(problem)
    mu, mf = make_moe(problem, cfg, "unfused"), make_moe(problem, cfg, "fused")
    a, b = run(mu, t), run(mf, t)
    c = fused_c_prec(mf, a.device)
    check_matches_reference(problem, t, cfg, mu, out=a)
    check_matches_reference(problem, t, cfg, mf, out=b, c_prec=c)
    return {"bitwise": bool(torch.equal(a, b)), "c_prec": c}


# =========================================================================== QDQ call accounting
@contextlib.contextmanager
def record_act_qdq(monkeypatch=None, replace=None):
    """Wrap harness.moe.quantize_input.moe_kernel_quantize_input; yields the
    list of calls (shape, quant_dtype, input tensor, output tensor). With
    `replace`, that function is called instead of the real one."""
    qi = quantize_input_module()
    orig = qi.moe_kernel_quantize_input
    calls = []

    def wrapper(A, A_scale, quant_dtype, *args, **kw):
        res = (replace or orig)(A, A_scale, quant_dtype, *args, **kw)
        calls.append({"shape": tuple(A.shape), "quant_dtype": quant_dtype, "input": A, "output": res[0]})
        return res

    qi.moe_kernel_quantize_input = wrapper
    try:
        yield calls
    finally:
        qi.moe_kernel_quantize_input = orig


def check_single_quantization(problem, t=None, moe=None):
    """Exactly one activation QDQ per GEMM input per forward (a1 over [T, H],
    a2 over the [T*k, I] pairs), none of them re-quantizing an earlier output;
    zero calls for weight-only schemes."""
    if t is None:
        t, _, _, moe = setup(problem)
    scheme = ref.resolve_scheme(problem.scheme)
    with record_act_qdq() as calls:
        run(moe, t)
    desc = [(c["shape"], c["quant_dtype"]) for c in calls]
    if scheme.act_fmt is None:
        assert not calls, f"weight-only scheme {scheme.name}: activation QDQ called {len(calls)}x: {desc}"
        return {"calls": 0}
    T, H, I, k = problem.T, problem.H, problem.I, problem.top_k
    assert len(calls) == 2, f"{scheme.name}: expected 2 activation QDQ calls (a1, a2) per forward, got {len(calls)}: {desc}"
    a1, a2 = calls
    assert a1["shape"][-1] == H and math.prod(a1["shape"][:-1]) == T, f"a1 QDQ over {a1['shape']}, expected [T={T}, H={H}]"
    assert a2["shape"][-1] == I and math.prod(a2["shape"][:-1]) == T * k, f"a2 QDQ over {a2['shape']}, expected [T*k={T * k}, I={I}]"
    for c in calls:
        assert c["quant_dtype"] == scheme.quant_dtype, f"QDQ dispatched with {c['quant_dtype']!r}, scheme key {scheme.quant_dtype!r}"
    return {"calls": 2}


def identity_qdq(A, A_scale, quant_dtype, *args, **kw):
    return A, None


def check_no_silent_skip(problem, t=None, moe=None, cfg=None):
    """For schemes that quantize activations, the forward differs from the same
    forward with activation QDQ disabled (the inputs are chosen so that QDQ is
    not the identity: the reference shows a difference beyond tolerance)."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    scheme = ref.resolve_scheme(problem.scheme)
    if scheme.act_fmt is None or problem.T == 0:
        return {"skipped": True}
    out = run(moe, t)
    with record_act_qdq(replace=identity_qdq):
        out_noq = run(moe, t)
    # The reference must itself show that QDQ matters for these inputs.
    trace = reference_trace(problem, t, cfg)
    noq_cfg = _NoActQdqConfig(cfg)
    trace_noq = reference_trace(problem, t, noq_cfg)
    tol = output_tolerance(trace, problem, cfg, t.hidden.dtype)
    if not bool(((trace.out - trace_noq.out).abs() > 2 * tol).any()):
        return {"skipped": True}  # QDQ is (numerically) the identity here
    assert not torch.equal(out, out_noq), (
        f"{scheme.name}: output identical with activation QDQ disabled: activation quantization was skipped ({problem!r})")
    return {"skipped": False}


class _NoActQdqConfig:
    """A config view whose scheme quantizes no activations (reference only)."""

    def __init__(self, cfg):
        self._cfg = cfg
        self.scheme = dataclasses.replace(ref.resolve_scheme(cfg.scheme), act_fmt=None, quant_dtype=None)

    def __getattr__(self, name):
        return getattr(self._cfg, name)


def check_dispatcher_keys():
    """Every scheme's activation dispatch key quantizes (QDQ is not the
    identity on a generic tensor); an unknown key raises ValueError."""
    qi = quantize_input_module()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 3
    for name, scheme in hm().SCHEMES.items():
        if scheme.act_fmt is None:
            continue
        gs = torch.tensor(2688.0 / float(x.abs().max())) if scheme.quant_dtype == "nvfp4" else None
        y, _ = qi.moe_kernel_quantize_input(x, gs, scheme.quant_dtype, scale_mode=scheme.scale_mode)
        assert not torch.equal(y, x), f"{name}: dispatch key {scheme.quant_dtype!r} left the activations unquantized"
        want = ref.qdq_activation(x, scheme, gscale=gs)
        assert torch.equal(y, want), f"{name}: dispatcher QDQ differs from the spec's reference QDQ"
    for bad in ("mxfp6", "fp4", "nvfp8", "MXFP4", "int4"):
        try:
            qi.moe_kernel_quantize_input(x, None, bad)
        except ValueError:
            continue
        raise AssertionError(f"dispatcher accepted unknown quant dtype {bad!r} (must raise ValueError)")
    return {}


# =========================================================================== scales
def check_scale_sensitivity(problem, t=None, cfg=None):
    """Changing a scale the scheme uses changes the output; a missing required
    scale raises. NVFP4 activation global scales are multiplied by 3, not 2:
    QDQ(x; 2 gs) == QDQ(x; gs) whenever the E4M3 block scales stay normal
    (scaling an E4M3 value by 2 is exact and cancels in s/gs), so doubling
    is the wrong probe. Weight global scales are dequantize-only: doubling
    halves the weights."""
    if t is None:
        t, _, cfg, _ = setup(problem)
    scheme = ref.resolve_scheme(problem.scheme)
    if problem.T == 0:
        return {"skipped": True}
    base = run(make_moe(problem, cfg), t)
    probes = []
    if scheme.is_nvfp4:
        probes = [("a1_gscale", 3.0), ("a2_gscale", 3.0), ("w13_gscale", 2.0), ("w2_gscale", 2.0)]
    elif scheme.quant_dtype == "fp8" and cfg.a1_scale is not None:
        probes = [("a1_scale", 3.0), ("a2_scale", 3.0)]
    changed = {}
    for name, f in probes:
        v = getattr(cfg, name)
        cfg2 = dataclasses.replace(cfg, **{name: v * f})
        out2 = run(make_moe(problem, cfg2), t)
        trace = reference_trace(problem, t, cfg2)
        trace0 = reference_trace(problem, t, cfg)
        if torch.equal(trace.out, trace0.out):
            continue  # the reference itself is insensitive here (e.g. saturation)
        assert not torch.equal(out2, base), f"{scheme.name}: output unchanged after {name} x{f}: the layer ignores {name}"
        changed[name] = True
    # Missing required scales.
    required = ["a1_gscale", "a2_gscale"] if scheme.needs_act_gscale else []
    for name in required:
        cfg3 = dataclasses.replace(cfg, **{name: None})
        try:
            run(make_moe(problem, cfg3), t)
        except ValueError:
            continue
        raise AssertionError(f"{scheme.name}: {name}=None did not raise (a missing scale must never default to 1.0)")
    if scheme.is_nvfp4:
        for name in ("w13_gscale", "w2_gscale"):
            try:
                run(make_moe(problem, dataclasses.replace(cfg, **{name: None})), t)
            except ValueError:
                continue
            raise AssertionError(f"{scheme.name}: {name}=None did not raise (a missing scale must never default to 1.0)")
    return {"changed": changed}


# =========================================================================== shared config
def _snapshot(obj):
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, hf.QuantizedTensor):
            out[f.name] = (id(v), {k: (id(x), x.clone()) if isinstance(x, torch.Tensor) else (id(x), x)
                                   for k, x in vars(v).items()})
        elif isinstance(v, torch.Tensor):
            out[f.name] = (id(v), v.clone())
        else:
            out[f.name] = (id(v), v)
    return out


def _same_snapshot(a, b) -> list:
    diffs = []
    for k in a:
        ia, va = a[k]
        ib, vb = b[k]
        if ia != ib:
            diffs.append(k)
        elif isinstance(va, dict):
            for kk in va:
                (i1, x1), (i2, x2) = va[kk], vb[kk]
                if i1 != i2 or (isinstance(x1, torch.Tensor) and not torch.equal(x1, x2)):
                    diffs.append(f"{k}.{kk}")
        elif isinstance(va, torch.Tensor) and not torch.equal(va, vb):
            diffs.append(k)
    return diffs


def check_shared_config(problem, t=None, cfg=None):
    """Two experts objects built from one config give identical outputs, and
    building them leaves the config untouched."""
    if t is None:
        t = problem.tensors()
        cfg = load_config(problem, t)
    before = _snapshot(cfg)
    try:
        o1 = run(make_moe(problem, cfg), t)
        o2 = run(make_moe(problem, cfg), t)
    except Exception as exc:
        raise AssertionError(f"a second experts object built from the same config fails: {type(exc).__name__}: {exc}") from exc
    diffs = _same_snapshot(before, _snapshot(cfg))
    assert not diffs, f"building experts modified the shared quant config: {diffs}"
    from suites.properties._util import assert_bitwise_equal

    assert_bitwise_equal(o2, o1, "second experts object built from the same config")
    return {}


# =========================================================================== equivariance
def permute_experts(cfg, perm):
    """Config whose expert i is expert perm[i] of cfg."""
    def pq(q):
        return hf.QuantizedTensor(q.codes[perm], q.scales[perm],
                                  q.global_scale[perm] if (q.global_scale is not None and q.global_scale.dim()) else q.global_scale,
                                  q.fmt, q.scale_mode, q.rounding, q.dtype)
    kw = dict(w13_q=pq(cfg.w13_q), w2_q=pq(cfg.w2_q))
    for name in ("w13_gscale", "w2_gscale"):
        v = getattr(cfg, name)
        if v is not None and v.dim():
            kw[name] = v[perm]
    return dataclasses.replace(cfg, **kw)


def check_token_equivariance(problem, t=None, cfg=None, moe=None, seed=0):
    """moe(P x) == P moe(x) for a token permutation P (within the reference
    tolerance of both sides)."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    T = problem.T
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(seed))
    out = run(moe, t)
    tp = dataclasses.replace(t, hidden=t.hidden[perm], router_logits=t.router_logits[perm])
    outp = run(moe, tp)
    tol = output_tolerance(reference_trace(problem, t, cfg), problem, cfg, t.hidden.dtype)
    err = (outp.double() - out[perm].double()).abs()
    bad = ~(err <= 2 * tol[perm])
    assert not bool(bad.any()), _describe_mismatch("token permutation", outp, out[perm], 2 * tol[perm], bad)
    return {"bitwise": bool(torch.equal(outp, out[perm]))}


def check_expert_equivariance(problem, t=None, cfg=None, moe=None, seed=0):
    """Relabelling experts together with the router columns leaves the output
    unchanged. Only for logits without ties (problem.logits == "distinct"):
    with ties the lowest-index rule depends on the labels."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    assert problem.logits == "distinct", "expert equivariance needs tie-free router logits"
    E = problem.E
    perm = torch.randperm(E, generator=torch.Generator().manual_seed(seed))
    out = run(moe, t)
    cfgp = permute_experts(cfg, perm)
    tp = dataclasses.replace(t, router_logits=t.router_logits[:, perm])
    outp = run(make_moe(problem, cfgp), tp)
    tol = output_tolerance(reference_trace(problem, t, cfg), problem, cfg, t.hidden.dtype)
    err = (outp.double() - out.double()).abs()
    bad = ~(err <= 2 * tol)
    assert not bool(bad.any()), _describe_mismatch("expert relabelling", outp, out, 2 * tol, bad)
    return {"bitwise": bool(torch.equal(outp, out))}


# =========================================================================== checkpoint conventions
def check_checkpoint_conventions(problem, t=None):
    """Loading the problem's weights in either NVFP4 convention (ModelOpt
    decode-side, compressed-tensors encode-side) yields the truth's dequantized
    weights and activation global scales (up to the float32 reciprocal: 4u)."""
    if t is None:
        t = problem.tensors()
    truth = truth_of(problem, t)
    scheme = ref.resolve_scheme(problem.scheme)
    convs = ("modelopt", "compressed_tensors") if scheme.is_nvfp4 else ("native",)
    want13 = ref.dequant_weight(truth.w13_q, truth.w13_gscale, scheme, "w13")
    want2 = ref.dequant_weight(truth.w2_q, truth.w2_gscale, scheme, "w2")
    for conv in convs:
        p = problem.replace(ckpt=conv) if scheme.is_nvfp4 else problem
        cfg = load_config(p, t, truth)
        got13 = ref.dequant_weight(cfg.w13_q, cfg.w13_gscale, scheme, "w13")
        got2 = ref.dequant_weight(cfg.w2_q, cfg.w2_gscale, scheme, "w2")
        for what, got, want in (("w13", got13, want13), ("w2", got2, want2)):
            bad = ~((got - want).abs() <= 4 * U * want.abs())
            assert not bool(bad.any()), (
                f"{conv}: dequantized {what} differs from the truth at {int(bad.sum())} elements, e.g. "
                f"{got[bad][:3].tolist()} vs {want[bad][:3].tolist()}")
        for name in ("a1_gscale", "a2_gscale"):
            tv = getattr(truth, name)
            if tv is None:
                continue
            v = getattr(cfg, name)
            assert v is not None, f"{conv}: loader dropped {name}"
            rel = abs(float(v) / float(tv) - 1)
            assert rel <= 4 * U, f"{conv}: {name} = {float(v)} but the truth is {float(tv)} (one max over experts, encode side)"
    return {}


# =========================================================================== placement
def tensors_reachable(obj, depth=3, seen=None):
    """(path, tensor) for every tensor reachable from an object's attributes."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield "", obj
        return
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif isinstance(obj, torch.nn.Module):
        items = list(vars(obj).items()) + list(obj._parameters.items()) + list(obj._buffers.items()) + list(obj._modules.items())
    elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        if type(obj).__module__.startswith(("torch", "builtins", "enum")):
            return
        items = vars(obj).items()
    else:
        return
    for k, v in items:
        for p, tt in tensors_reachable(v, depth - 1, seen):
            yield f".{k}{p}", tt


def check_buffers_follow_weights(moe):
    dev = moe.quant_config.device if moe.quant_config is not None else None
    wrong = [(p, str(x.device)) for p, x in tensors_reachable(moe, depth=4) if x.device != dev]
    assert not wrong, f"buffers not on the weights' device {dev}: {wrong[:6]}"
    return {"device": str(dev)}


class MinimalMoELayer(torch.nn.Module):
    """A layer object with ONLY the MoE attributes (no `.weight`)."""

    def __getattr__(self, name):
        if name == "weight":
            raise AttributeError("a MoE layer has no attribute 'weight' (only w13_weight / w2_weight)")
        return super().__getattr__(name)


def _nvfp4_ckpt_for_conversion(E=2, H=32, I=32, device="cpu", seed=0):
    from harness.strategies import MoEProblem

    p = MoEProblem("nvfp4", E, 1, H, I, 2, seed, ckpt="modelopt")
    t = p.tensors()
    d = checkpoint_tensors(p, t, truth_of(p, t))
    return {k: v.to(device) for k, v in d.items()}


def check_conversion_every_backend(device="cpu"):
    """Every backend branch of both kernel-format conversions runs with a
    minimal layer (only MoE attributes), and its outputs live on w13's device."""
    H = hm()
    ran = []
    for backend in H.MoEBackend:
        d = _nvfp4_ckpt_for_conversion(device=device)
        layer = MinimalMoELayer()
        layer.w13_weight = torch.nn.Parameter(d["w13_weight"], requires_grad=False)
        layer.w2_weight = torch.nn.Parameter(d["w2_weight"], requires_grad=False)
        try:
            out = H.convert_to_nvfp4_moe_kernel_format(
                layer, d["w13_weight"], d["w13_weight_scale"], d["w13_weight_scale_2"], d["w2_weight"],
                d["w2_weight_scale"], d["w2_weight_scale_2"], d["w13_input_scale"], d["w2_input_scale"], backend)
        except Exception as exc:
            raise AssertionError(f"nvfp4 conversion, backend {backend.name}, minimal layer: {type(exc).__name__}: {exc}") from exc
        wrong = [(p, str(x.device)) for p, x in tensors_reachable(out, depth=4) if x.device != d["w13_weight"].device]
        assert not wrong, f"nvfp4 {backend}: converted tensors off the weights' device: {wrong[:4]}"
        ran.append(("nvfp4", backend))
        for name, scheme in H.SCHEMES.items():
            if scheme.is_nvfp4:
                continue
            from harness.strategies import MoEProblem

            p = MoEProblem(name, 2, 1, 32, 32, 2, 0)
            t = p.tensors()
            c = {k: v.to(device) for k, v in checkpoint_tensors(p, t, truth_of(p, t)).items()}
            try:
                out = H.convert_to_ocp_mx_moe_kernel_format(layer, c["w13_weight"], c["w13_weight_scale"], c["w2_weight"],
                                                           c["w2_weight_scale"], backend, scheme=name)
            except Exception as exc:
                raise AssertionError(f"{name} conversion, backend {backend.name}, minimal layer: {type(exc).__name__}: {exc}") from exc
            wrong = [(pp, str(x.device)) for pp, x in tensors_reachable(out, depth=4) if x.device != c["w13_weight"].device]
            assert not wrong, f"{name} {backend}: converted tensors off the weights' device: {wrong[:4]}"
            ran.append((name, backend))
    return {"ran": ran}


def check_create_weights_every_scheme(device="cpu"):
    """create_moe_weights + convert_layer_weights for every scheme x backend
    with emulation forced: every branch creates *_weight_scale."""
    H = hm()
    for name in H.SCHEME_NAMES:
        for backend in H.MoEBackend:
            layer = MinimalMoELayer()
            try:
                H.create_moe_weights(layer, name, 2, 32, 32, backend, emulation=True, device=device)
            except Exception as exc:
                raise AssertionError(f"{name} x {backend.name}: create_moe_weights raised {type(exc).__name__}: {exc}") from exc
            for attr in ("w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale"):
                assert hasattr(layer, attr), f"{name} x {backend.name}: create_moe_weights did not create {attr}"
            try:
                H.convert_layer_weights(layer, name, backend)
            except Exception as exc:
                raise AssertionError(f"{name} x {backend.name}: weight post-processing raised {type(exc).__name__}: {exc}") from exc
    return {}


# =========================================================================== no host work in forward
class HostWorkInForward(AssertionError):
    pass


_GUARDED_CREATORS = ("tensor", "as_tensor", "from_numpy")
_SYNC_METHODS = ("__bool__", "item", "tolist", "numpy", "__int__", "__float__", "__index__")
_DATA_DEPENDENT = ("nonzero", "masked_select", "unique", "unique_consecutive", "argwhere")


@contextlib.contextmanager
def no_host_work():
    """During the block: any host sync (Python truthiness / item / tolist of
    a tensor, data-dependent output shapes), any tensor built from host data
    (torch.tensor / as_tensor / from_numpy), any cross-device copy, and any
    decode table built or moved (a lookup-table cache miss in
    harness.formats) raises HostWorkInForward. On a GPU each of these is a
    host sync or a host->device copy, which CUDA graph capture forbids; on the
    CPU this is the detectable proxy."""
    saved = []

    def patch(owner, name, new):
        saved.append((owner, name, owner.__dict__.get(name, None) if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, new)

    def raiser(what):
        def f(*a, **k):
            raise HostWorkInForward(f"host work in forward: {what}")
        return f

    try:
        for m in _SYNC_METHODS:
            patch(torch.Tensor, m, raiser(f"Tensor.{m} (host sync)"))
        for m in _DATA_DEPENDENT:
            if hasattr(torch.Tensor, m):
                patch(torch.Tensor, m, raiser(f"Tensor.{m} (data-dependent shape: host sync)"))
            if hasattr(torch, m):
                patch(torch, m, raiser(f"torch.{m} (data-dependent shape: host sync)"))
        orig_as_tensor = torch.as_tensor
        patch(torch, "tensor", raiser("torch.tensor (tensor from host data)"))
        patch(torch, "from_numpy", raiser("torch.from_numpy (tensor from host data)"))

        def as_tensor(data, *a, **k):
            if not isinstance(data, torch.Tensor):
                raise HostWorkInForward("host work in forward: torch.as_tensor of host data")
            return orig_as_tensor(data, *a, **k)
        patch(torch, "as_tensor", as_tensor)
        orig_to = torch.Tensor.to

        def to(self, *a, **k):
            res = orig_to(self, *a, **k)
            if res.device != self.device:
                raise HostWorkInForward(f"host work in forward: Tensor.to copies {self.device} -> {res.device}")
            return res
        patch(torch.Tensor, "to", to)
        patch(torch.Tensor, "cuda", raiser("Tensor.cuda (host->device copy)"))
        patch(minifloat, "_cpu_lut", raiser("a decode table is built during forward (not prepared at conversion)"))
        patch(scales, "_e8m0_tables", raiser("E8M0 tables built during forward (not prepared at conversion)"))
        yield
    finally:
        for owner, name, old in reversed(saved):
            if old is None and isinstance(owner, type):
                delattr(owner, name)
            else:
                setattr(owner, name, old)


def fresh_table_caches(monkeypatch):
    """Empty the per-device decode-table caches of harness.formats, so a test
    sees whether conversion (not forward) fills them."""
    monkeypatch.setattr(minifloat, "_LUTS", {})
    monkeypatch.setattr(scales, "_DEVICE_TABLES", {})


def check_no_host_work_in_forward(problem, moe, t):
    """A forward performs no host sync, no host->device copy and builds no
    lookup table (the CPU proxy of CUDA-graph capturability)."""
    with torch.no_grad(), no_host_work():
        moe(t.hidden, t.router_logits)
    return {}


@contextlib.contextmanager
def single_thread():
    """torch intra-op threads = 1 for the block (the suites run under
    pytest -n 2 on small tensors: extra threads only contend)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def examples(fraction: float, minimum: int = 3):
    """hypothesis settings with max_examples = fraction of the active profile's
    (dev 40 / ci 60 / nightly 2000), at least `minimum`. The MoE properties are
    parametrized over the 8 schemes, so fraction 1/4 already runs twice the
    profile's count per property."""
    from hypothesis import settings

    n = settings.default.max_examples
    return settings(max_examples=max(minimum, int(n * fraction)))


# =========================================================================== rounding of exact ties
def tie_blocks(fmt: str, rows: int = 4, seed: int = 0):
    """float32 [rows, 2 blocks] whose elements are EXACT midpoints between
    adjacent element codes after scaling (k + 1/2 code steps), each block
    anchored by +-max_normal so its scale is a known power of two; for nvfp4
    use global_scale = 2^j (returned) so that s and gs/s are powers of two too.
    Returns (x, global_scale or None)."""
    spec = hf.FORMATS[fmt]
    el = spec.element
    vals = sorted({minifloat.decode_value(el, c) for c in range(el.sign_bit)} - {math.nan})
    vals = [v for v in vals if math.isfinite(v)]
    mids = torch.tensor([(a + b) / 2 for a, b in zip(vals, vals[1:])], dtype=F64)
    g = torch.Generator().manual_seed(seed)
    B = spec.block_size
    n = rows * 2
    pick = mids[torch.randint(0, len(mids), (n, B), generator=g)]
    sign = torch.where(torch.rand(n, B, generator=g) < 0.5, -1.0, 1.0).double()
    blk = pick * sign
    blk[:, 0] = el.max_normal * sign[:, 0]
    e = torch.randint(-3, 4, (n, 1), generator=g).double()
    if spec.has_global_scale:
        # amax = 6 * 2^e; gs = 2^j with j such that gs*amax/6 = 2^(j+e) is a normal E4M3.
        gs = torch.tensor(2.0**3, dtype=F32)
        x = blk * torch.pow(2.0, e)
        return x.reshape(rows, 2 * B).to(F32), gs
    x = blk * torch.pow(2.0, e)
    return x.reshape(rows, 2 * B).to(F32), None


def check_activation_qdq_ties(scheme_name: str, backends=("torch",)):
    """On exact tie inputs, the layer's activation QDQ (the dispatcher, with
    each op backend) equals the spec (round half to EVEN) bit for bit, and the
    inputs really are ties (rounding half AWAY gives a different result)."""
    scheme = ref.resolve_scheme(scheme_name)
    if scheme.act_fmt is None or scheme.act_fmt == "fp8":
        return {"skipped": True}
    qi = quantize_input_module()
    x, gs = tie_blocks(scheme.act_fmt)
    kw = {} if gs is None else {"global_scale": gs}
    mode = {} if gs is not None else {"scale_mode": scheme.scale_mode}
    want = hf.qdq(x, scheme.act_fmt, rounding="rne", **mode, **kw)
    away = hf.qdq(x, scheme.act_fmt, rounding="away", **mode, **kw)
    assert not torch.equal(want, away), "tie inputs are not ties (test construction)"
    for backend in backends:
        got, _ = qi.moe_kernel_quantize_input(x, gs, scheme.quant_dtype, scale_mode=scheme.scale_mode, backend=backend)
        from suites.properties._util import assert_bitwise_equal

        assert_bitwise_equal(got, want, f"{scheme.name} activation QDQ on exact ties (backend {backend}) vs spec RNE")
    return {}


# =========================================================================== int64 offsets
def check_fused_large_offsets(device="cpu", scheme_name="w_mxfp8", E=3, N=32, K=64):
    """The fused dequant+GEMM addresses expert weights past 2^31 bytes
    correctly. The weight codes of expert e live at e * S bytes with
    S = 2^30 + 4096 in one large, mostly untouched allocation (virtual memory
    only: pages that are never written are never committed), so expert 2
    starts beyond 2^31: int32 offset arithmetic wraps there. Rows routed to the
    last expert must equal x @ dequant(W[e]).T (float32 GEMM bound)."""
    from harness.kernels import fused_gemm as fused

    scheme = ref.resolve_scheme(scheme_name)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(E, N, K, generator=g)
    q = hf.quantize(w, scheme.weight_fmt, scale_mode=scheme.scale_mode)
    fw = fused.FusedWeights.from_quantized(q, None)
    fw = dataclasses.replace(fw, data=fw.data.to(device), mult=fw.mult.to(device) if fw.mult is not None else None,
                             mult_bf16=fw.mult_bf16.to(device) if fw.mult_bf16 is not None else None)
    S = 2**30 + 4096
    Kd = fw.data.shape[-1]
    big = torch.empty(E * S, dtype=torch.uint8, device=device)
    data = big.as_strided((E, N, Kd), (S, Kd, 1))
    data.copy_(fw.data)
    fw_big = dataclasses.replace(fw, data=data)
    P = 8
    x = hf.qdq(torch.randn(P, K, generator=g), "mxfp8_e4m3").to(device)
    ids = torch.tensor([E - 1] * (P - 2) + [0, 1], dtype=torch.int64, device=device)
    wd = ref.dequant_weight(q, None, scheme, "w")
    want = torch.stack([x[p].cpu().double() @ wd[int(ids[p])].T for p in range(P)])
    tol = 2 * gamma(K) * torch.stack([x[p].cpu().double().abs() @ wd[int(ids[p])].abs().T for p in range(P)]) + 2.0**-140
    modes = [m for m in getattr(fused, "MODES", ("fused",)) if m != "auto"]
    for mode in modes:
        kw = {"mode": mode} if hasattr(fused, "MODES") else {}
        out = fused.moe_gemm(x, ids, fw_big, precision="ieee", **kw)
        err = (out.cpu().double() - want).abs()
        bad = ~(err <= tol)
        assert not bool(bad.any()), _describe_mismatch(
            f"fused GEMM (mode {mode}) with expert offsets up to {(E - 1) * S} bytes", out.cpu(), want, tol, bad)
    return {"max_offset": (E - 1) * S, "modes": modes}


def check_dynamo_fullgraph(problem, t=None, moe=None):
    """torch.compile(fullgraph=True, backend="eager") traces the whole forward
    with no graph break (a graph break is where a tensor value is needed on
    the host: truthiness, item, data-dependent shapes) and equals eager bit
    for bit (backend "eager" runs the traced ops unchanged). The CPU proxy of
    the GPU torch.compile test; cheap because nothing is code-generated."""
    if t is None:
        t, _, _, moe = setup(problem)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(moe, fullgraph=True, backend="eager")
        with torch.no_grad():
            out = compiled(t.hidden, t.router_logits)
    except Exception as exc:
        raise AssertionError(f"torch.compile(fullgraph=True) failed: {type(exc).__name__}: {str(exc)[:400]}") from exc
    finally:
        torch._dynamo.reset()
    eager = run(moe, t)
    from suites.properties._util import assert_bitwise_equal

    assert_bitwise_equal(out, eager, "dynamo-traced forward vs eager")
    return {}
