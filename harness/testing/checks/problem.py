"""Shared helpers of the MoE checks: a problem (harness.strategies.MoEProblem)
turned into ground-truth quantized weights, a checkpoint in the problem's
convention, a loaded config and a layer; the float64 reference trace and the
tolerance of harness/moe/tolerance.py (the one model `moe-harness run` uses too).

Every check in harness/testing/checks/ raises AssertionError (with a readable message)
when its property fails and returns a small dict of measurements when it holds.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import torch

import harness.formats as hf
import harness.moe as hm
from harness.moe import reference as ref
from harness.moe import tolerance as _tol

F32, F64 = torch.float32, torch.float64
U = _tol.U
gamma = _tol.gamma


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


@dataclasses.dataclass
class Extras:
    """What a layer of the problem needs besides its experts' config: the
    router's correction bias and the shared MLP's config (one expert)."""

    e_score_correction_bias: Optional[torch.Tensor] = None
    shared_cfg: Optional[object] = None


def _calibration_inputs(problem, t):
    """float64 (a1 input [T, H], act(a1 @ w13[e].T + w13_bias[e]) for every
    token and expert [T, E, I]) of the routed experts (calibration)."""
    x = t.hidden.double()
    if problem.weight_on_input and x.numel():
        w, _ = ref.reference_route(t.router_logits, problem.top_k, scoring=problem.scoring,
                                   renormalize=problem.renormalize, routed_scaling_factor=problem.routed_scaling)
        x = x * w
    h = torch.einsum("th,enh->ten", x, t.w13.double())
    if t.w13_bias is not None:
        h = h + t.w13_bias.double().unsqueeze(0)
    return x, ref.reference_activation(h, problem.activation)


def _quantized_truth(problem, w13, w2, calib) -> Truth:
    """Weights quantized as the problem's checkpoint stores them; activation
    scales calibrated on calib = (a1 input, dense intermediate) (float64)."""
    scheme = ref.resolve_scheme(problem.scheme)
    if hf.FORMATS[scheme.weight_fmt].has_global_scale:
        def qz(w):
            gs = hf.nvfp4_global_scale(w.abs().amax(dim=(1, 2)), scheme.weight_fmt)
            return hf.quantize(w, scheme.weight_fmt, global_scale=gs.reshape(-1, 1)), gs
        w13_q, gs13 = qz(w13)
        w2_q, gs2 = qz(w2)
    else:
        w13_q = hf.quantize(w13, scheme.weight_fmt, scale_mode=scheme.scale_mode)
        w2_q = hf.quantize(w2, scheme.weight_fmt, scale_mode=scheme.scale_mode)
        gs13 = gs2 = None
    tr = Truth(w13_q, w2_q, gs13, gs2)
    two_level_act = scheme.act_fmt in hf.FORMATS and hf.FORMATS[scheme.act_fmt].has_global_scale
    if (two_level_act or scheme.act_per_tensor) and problem.act_scale:
        x, g = calib
        a1max = x.abs().amax() if x.numel() else torch.zeros((), dtype=F64)
        a2max = g.abs().amax() if g.numel() else torch.zeros((), dtype=F64)
        if two_level_act:
            def gsc(a):
                num = hf.FORMATS[scheme.act_fmt].gs_numerator
                return (num / a * problem.act_scale if a > 0 else torch.ones((), dtype=F64)).to(F32)
            tr.a1_gscale, tr.a2_gscale = gsc(a1max), gsc(a2max)
        else:
            def dsc(a):
                return (a / hf.E4M3.max_normal / problem.act_scale if a > 0 else torch.ones((), dtype=F64)).to(F32)
            tr.a1_scale, tr.a2_scale = dsc(a1max), dsc(a2max)
    return tr


def truth_of(problem, t) -> Truth:
    """The routed experts' truth (activation scales from their own GEMM inputs)."""
    return _quantized_truth(problem, t.w13, t.w2, _calibration_inputs(problem, t))


def shared_truth_of(problem, t) -> Optional[Truth]:
    """The shared MLP's truth (one expert), or None: quantized in the problem's
    scheme, activation scales from ITS GEMM inputs (hidden; act(hidden @ W.T))."""
    if t.shared_w13 is None:
        return None
    w13, w2 = t.shared_w13.unsqueeze(0), t.shared_w2.unsqueeze(0)
    x = t.hidden.double()
    g = ref.reference_activation(torch.einsum("th,enh->ten", x, w13.double()), problem.activation)
    return _quantized_truth(problem, w13, w2, (x, g))


def extras_of(problem, t, device="cpu") -> Extras:
    """The correction bias and the shared MLP's config (loaded through the
    problem's checkpoint convention, like the experts')."""
    t = _to(t, "cpu")  # the same config whatever device the tensors are on
    bias = None if t.e_score_correction_bias is None else t.e_score_correction_bias.to(device)
    st = shared_truth_of(problem, t)
    return Extras(bias, None if st is None else load_config(problem, None, st, device))


def checkpoint_tensors(problem, t, truth: Truth) -> dict:
    """The problem's weights as a checkpoint dict in the problem's convention."""
    scheme = ref.resolve_scheme(problem.scheme)
    spec = hf.FORMATS[scheme.weight_fmt]

    def codes(q):
        return hf.pack_fp4(q.codes) if spec.is_fp4 else q.codes

    d = {"w13_weight": codes(truth.w13_q), "w2_weight": codes(truth.w2_q)}
    if not spec.has_global_scale:
        d["w13_weight_scale"], d["w2_weight_scale"] = truth.w13_q.scales, truth.w2_q.scales
        return d
    scale_dtype = getattr(torch, spec.scale.torch_dtype)  # E4M3FN for nvfp4
    d["w13_weight_scale"] = truth.w13_q.scales.view(scale_dtype)
    d["w2_weight_scale"] = truth.w2_q.scales.view(scale_dtype)
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
    biases = {} if t is None or t.w13_bias is None else {"w13_bias": t.w13_bias.to(device),
                                                         "w2_bias": t.w2_bias.to(device)}
    scheme = ref.resolve_scheme(problem.scheme)
    if hf.FORMATS[scheme.weight_fmt].has_global_scale:
        loader = hm.load_modelopt_nvfp4 if problem.ckpt == "modelopt" else hm.load_compressed_tensors_nvfp4
        cfg = loader(d, scheme=scheme)
    else:
        cfg = hm.load_ocp_mx(d, scheme=scheme.name)
        if truth.a1_scale is not None:
            cfg = dataclasses.replace(cfg, a1_scale=truth.a1_scale.to(device), a2_scale=truth.a2_scale.to(device))
    return dataclasses.replace(cfg, **biases) if biases else cfg


def make_moe(problem, cfg, backend: str = "unfused", extras: Optional[Extras] = None, **kw):
    """The layer of a problem from its experts' config; `extras` (correction
    bias, shared config) default to the problem's own (extras_of)."""
    if extras is None:
        extras = extras_of(problem, problem.tensors(), cfg.device)
    shared = None if extras.shared_cfg is None else hm.make_experts(extras.shared_cfg, backend=backend, **kw)
    return hm.FusedMoE(hm.make_experts(cfg, backend=backend, **kw), arch=problem.arch,
                       e_score_correction_bias=extras.e_score_correction_bias, shared_experts=shared)


def _to(t, device):
    return dataclasses.replace(t, **{f.name: getattr(t, f.name).to(device) for f in dataclasses.fields(t)
                                     if getattr(t, f.name) is not None})


def setup(problem, backend: str = "unfused", device="cpu"):
    """(tensors, truth, cfg, moe) for a problem; tensors and config on `device`."""
    t = problem.tensors()
    truth = truth_of(problem, t)
    cfg = load_config(problem, t, truth, device)
    extras = extras_of(problem, t, device)
    if torch.device(device).type != "cpu":
        t = _to(t, device)
    return t, truth, cfg, make_moe(problem, cfg, backend, extras)


def run(moe, t) -> torch.Tensor:
    with torch.no_grad():
        return moe(t.hidden, t.router_logits)


def output_tolerance(trace: ref.ReferenceTrace, problem, cfg, out_dtype=F32, c_prec: float = 0.0,
                     **kw) -> torch.Tensor:
    return _tol.output_tolerance(trace, cfg, activation=problem.activation, out_dtype=out_dtype, c_prec=c_prec, **kw)


def reference_trace(problem, t, cfg, extras: Optional[Extras] = None, **kw) -> ref.ReferenceTrace:
    """The float64 reference of the problem's layer (its arch row, its extras)."""
    if extras is None:
        extras = extras_of(problem, t)
    return ref.reference_moe_trace(t.hidden, t.router_logits, cfg, arch=problem.arch,
                                   e_score_correction_bias=extras.e_score_correction_bias,
                                   shared_config=extras.shared_cfg, **kw)


def family_problem(family: str, scheme: str, **kw):
    """A small deterministic problem with a family's features
    (harness.moe.arch.FAMILIES: its routing kind, activation, biases, shared
    MLP; E=8, top_k <= 4, groups 4 of 2 keeping 2): a fixed case for checks and
    regressions. Keywords override fields of harness.strategies.MoEProblem."""
    from harness.moe.arch import FAMILIES
    from harness.strategies import MoEProblem

    a = FAMILIES[family]
    base = dict(E=8, top_k=min(a.top_k, 4), H=64, I=32, T=7, seed=3, scoring=a.scoring, renormalize=a.renormalize,
                activation=a.activation, logits="grid", ckpt="compressed_tensors" if scheme == "nvfp4" else "native",
                n_group=4 if a.grouped else 1, topk_group=2 if a.grouped else 1,
                routed_scaling=a.routed_scaling_factor, score_correction=a.score_correction,
                weight_on_input=a.router_weight_on_input, expert_bias=0 if a.expert_bias else None,
                shared=32 if a.shared_experts else 0, act_scale=0.0 if scheme == "w_mxfp4_a_fp8" else 1.0)
    base.update(kw)
    return MoEProblem(scheme, **base)


def describe_mismatch(what, got, want, tol, bad):
    idx = torch.nonzero(bad)[:4].tolist()
    n = int(bad.sum())
    ex = [(i, float(got[tuple(i)]), float(want[tuple(i)]), float(tol[tuple(i)])) for i in idx]
    return f"{what}: {n} of {bad.numel()} elements outside tolerance; (index, layer, reference, tol): {ex}"


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

