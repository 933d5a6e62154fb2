"""The bug-class checks, run against an MoE implementation as a black box
(build + forward) or through the hooks it provides. One row per check in
CHECKS; each run function takes a Ctx (the implementation and one
materialized problem), raises CheckFailed with a message and evidence when
its property fails, and returns a small dict of measurements when it holds.

Every value comparison is against the float64 reference
(harness.moe.reference) within the derived tolerance (harness.moe.tolerance)
widened only by the implementation's DECLARED GEMM precision (protocol.py,
GEMM_PRECISIONS); the evidence names the worst element: its index, the
implementation's value, the reference's, and the tolerance it is outside of.
The reference is exact float64 arithmetic on the spec's QDQ (its own rounding
is below 2^-40 relative, far inside every tolerance), so a value outside the
bound means the implementation is wrong (or computes in a lower precision
than it declares).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from harness.moe import reference as ref
from harness.moe import tolerance as tolm
from harness.moe.graphs import capture_forward
from harness.moe.schemes import get_scheme
from harness.testing.checks.device import tensors_reachable
from harness.testing.checks.host_work import HostWorkInForward, no_host_work

from harness.conformance.moe import problems as pb
from harness.conformance.moe import weights as wt
from harness.conformance.moe.protocol import MoEImplementation

IMPL_WRONG = "implementation wrong"


class CheckFailed(AssertionError):
    """A check's property does not hold: message plus evidence (a dict)."""

    def __init__(self, message: str, evidence: Optional[dict] = None):
        super().__init__(message)
        self.evidence = dict(evidence or {})


@dataclass
class Ctx:
    impl: MoEImplementation
    inst: pb.Instance

    @property
    def problem(self) -> pb.Problem:
        return self.inst.problem

    def build(self, weights: Optional[dict] = None):
        return self.impl.build(wt.MoEWeights(self.inst.weights if weights is None else weights), self.inst.config)

    def forward(self, fwd, hidden=None, logits=None) -> torch.Tensor:
        h = self.inst.hidden if hidden is None else hidden
        lg = self.inst.router_logits if logits is None else logits
        with torch.no_grad():
            out = fwd(h, lg)
        check_output(out, h)
        return out

    def tolerance(self, inst=None) -> torch.Tensor:
        return (inst or self.inst).tolerance(self.impl.c_prec)


def check_output(out, hidden):
    if not isinstance(out, torch.Tensor):
        raise CheckFailed(f"forward returned {type(out).__name__}, not a tensor", {"verdict": IMPL_WRONG})
    want = (tuple(hidden.shape), hidden.dtype, hidden.device)
    got = (tuple(out.shape), out.dtype, out.device)
    if got != want:
        raise CheckFailed(f"forward returned shape/dtype/device {got}, expected {want} (hidden's)",
                          {"verdict": IMPL_WRONG})


def outside(out, want, tol, what: str, extra: Optional[dict] = None):
    """Raise CheckFailed naming the worst element when |out - want| > tol anywhere."""
    err = (out.detach().cpu().double() - want).abs()
    bad = ~(err <= tol)
    if not bool(bad.any()):
        return float((err / tol).max()) if err.numel() else 0.0
    ratio = torch.where(bad, torch.nan_to_num(err / tol, nan=float("inf"), posinf=float("inf")),
                        torch.zeros_like(err))
    idx = tuple(int(i) for i in torch.nonzero(ratio == ratio.max())[0])
    ev = {"index": list(idx), "got": float(out.detach().cpu().double()[idx]), "expected": float(want[idx]),
          "tolerance": float(tol[idx]), "error": float(err[idx]), "outside": int(bad.sum()), "of": bad.numel(),
          "verdict": IMPL_WRONG}
    ev.update(extra or {})
    raise CheckFailed(f"{what}: {ev['outside']} of {ev['of']} outputs outside the derived tolerance; worst at "
                      f"{list(idx)}: got {ev['got']!r}, float64 reference {ev['expected']!r}, tolerance "
                      f"{ev['tolerance']:.3g} (error {ev['error']:.3g})", ev)


# --------------------------------------------------------------------------- checks
def run_oracle(ctx: Ctx) -> dict:
    out = ctx.forward(ctx.build())
    r = outside(out, ctx.inst.trace().out, ctx.tolerance(), "output vs the float64 reference")
    return {"max_err_over_tol": r}


def run_ties(ctx: Ctx) -> dict:
    out = ctx.forward(ctx.build())
    r = outside(out, ctx.inst.trace().out, ctx.tolerance(),
                "on exact ties (activation midpoints: the spec rounds half to even; equal logits: the lower "
                "expert index wins)")
    return {"max_err_over_tol": r}


def run_global_scale(ctx: Ctx) -> dict:
    out = ctx.forward(ctx.build())
    conv = ctx.impl.conventions["global_scale"]
    r = outside(out, ctx.inst.trace().out, ctx.tolerance(),
                f"per-expert global scales 2^12 apart, in the {conv!r} convention (weights.py)")
    return {"max_err_over_tol": r, "convention": conv}


def _scale_probes(scheme) -> list:
    """(truth attribute, factor): activation scales x3 (a power of two can
    cancel in NVFP4's s / gs), weight global scales x2 (exact both ways)."""
    if scheme.two_level:
        return [("a1_gscale", 3.0), ("a2_gscale", 3.0), ("w13_gscale", 2.0), ("w2_gscale", 2.0)]
    if scheme.act_per_tensor:
        return [("a1_scale", 3.0), ("a2_scale", 3.0)]
    return []


_PAYLOAD = ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale")


def run_scale_use(ctx: Ctx) -> dict:
    """Every scale the scheme uses moves the output as it moves the reference,
    and (two-level) a missing scale raises instead of defaulting to 1.0."""
    scheme = get_scheme(ctx.problem.scheme)
    base_out = ctx.forward(ctx.build())
    base_ref = ctx.inst.trace().out
    probed = {}
    for name, f in _scale_probes(scheme):
        if getattr(ctx.inst.truth, name) is None:
            continue
        inst2 = ctx.inst.with_truth(pb.scaled_truth(ctx.inst.truth, name, f))
        keys = sorted(k for k in inst2.weights if k not in _PAYLOAD
                      and not torch.equal(inst2.weights[k].cpu(), ctx.inst.weights[k].cpu()))
        if torch.equal(inst2.trace().out, base_ref):
            continue  # the reference itself does not move here (saturation)
        out2 = ctx.forward(ctx.build(inst2.weights))
        if torch.equal(out2, base_out):
            raise CheckFailed(f"output unchanged after {name} x{f:g} ({', '.join(keys)} changed): the implementation "
                              f"ignores {', '.join(keys)}", {"scale": name, "factor": f, "keys": keys,
                                                           "verdict": IMPL_WRONG})
        outside(out2, inst2.trace().out, ctx.tolerance(inst2), f"after {name} x{f:g} ({', '.join(keys)})",
                {"scale": name, "factor": f, "keys": keys})
        probed[name] = keys
    missing = []
    if scheme.two_level:
        for k in sorted(k for k in ctx.inst.weights if k not in _PAYLOAD):
            w = {kk: v for kk, v in ctx.inst.weights.items() if kk != k}
            try:
                ctx.forward(ctx.build(w))
            except CheckFailed:
                raise
            except Exception:
                missing.append(k)
                continue
            raise CheckFailed(f"{k} absent: build and forward succeeded (a missing scale must raise, never "
                              "default to 1.0)", {"missing": k, "verdict": IMPL_WRONG})
    return {"probed": probed, "missing_raised": missing}


def run_silent_skip(ctx: Ctx) -> dict:
    """The output is not the reference with activation quantization skipped
    (where the two references differ beyond both tolerances)."""
    out = ctx.forward(ctx.build())
    p = ctx.problem
    r = p.routing_row
    cfg0 = pb.without_act_qdq(ctx.inst.ref_config)
    tr0 = ref.reference_moe_trace(ctx.inst.hidden.cpu(), ctx.inst.router_logits.cpu(), cfg0, top_k=p.top_k,
                                  renormalize=r.renormalize, scoring=r.scoring, activation=p.activation)
    tol0 = tolm.output_tolerance(tr0, cfg0, activation=p.activation, out_dtype=ctx.inst.config.dtype,
                                 c_prec=ctx.impl.c_prec)
    want, tol = ctx.inst.trace().out, ctx.tolerance()
    apart = (want - tr0.out).abs() > tol + tol0
    n = int(apart.sum())
    if n == 0:
        return {"discriminating": 0}
    err0 = (out.detach().cpu().double() - tr0.out).abs()
    if bool((err0 <= tol0)[apart].all()):
        idx = tuple(int(i) for i in torch.nonzero(apart)[0])
        raise CheckFailed(
            f"activation quantization skipped: at all {n} outputs where quantizing the activations matters, the "
            f"output is the reference WITHOUT activation QDQ; e.g. at {list(idx)}: got "
            f"{float(out.detach().cpu().double()[idx])!r}, float64 reference {float(want[idx])!r} (tolerance "
            f"{float(tol[idx]):.3g}), without activation QDQ {float(tr0.out[idx])!r}",
            {"index": list(idx), "got": float(out.detach().cpu().double()[idx]), "expected": float(want[idx]),
             "tolerance": float(tol[idx]), "expected_without_act_qdq": float(tr0.out[idx]), "discriminating": n,
             "verdict": IMPL_WRONG})
    return {"discriminating": n}


def run_double_qdq(ctx: Ctx) -> dict:
    """Exactly one activation QDQ per GEMM input per forward (a1 over [T, H],
    a2 over [T*k, I]); none for weight-only schemes."""
    scheme = get_scheme(ctx.problem.scheme)
    fwd = ctx.build()
    with ctx.impl.observe_qdq() as calls:
        ctx.forward(fwd)
    shapes = [tuple(c["shape"]) for c in calls]
    p = ctx.problem
    want = [] if scheme.act_fmt is None else [(p.T, p.H), (p.T * p.top_k, p.I)]

    def rows_cols(s):
        n = 1
        for d in s[:-1]:
            n *= d
        return (n, s[-1]) if s else ()
    got = [rows_cols(s) for s in shapes]
    if got != want:
        raise CheckFailed(f"{len(shapes)} activation QDQ calls per forward over {shapes}; expected {len(want)} "
                          f"over {want} (one per GEMM input{'; weight-only: none' if not want else ''})",
                          {"calls": [list(s) for s in shapes], "expected": [list(s) for s in want],
                           "verdict": IMPL_WRONG})
    return {"calls": len(shapes)}


def run_device(ctx: Ctx) -> dict:
    """build gets a layer with ONLY the MoE parameters (no `.weight`); what it
    returns keeps its tensors on the weights' device, and the output is on
    the input's."""
    try:
        fwd = ctx.build()
    except AttributeError as e:
        raise CheckFailed(f"build read an attribute a FusedMoE layer does not have: {e}",
                          {"error": f"AttributeError: {e}", "verdict": IMPL_WRONG}) from None
    dev = ctx.inst.weights["w13_weight"].device
    wrong = [(p, str(t.device)) for p, t in tensors_reachable(fwd, depth=4) if t.device != dev]
    if wrong:
        raise CheckFailed(f"tensors of the built layer off the weights' device {dev}: {wrong[:6]}",
                          {"off_device": wrong[:16], "verdict": IMPL_WRONG})
    ctx.forward(fwd)  # output device checked there
    return {"device": str(dev)}


def run_capture(ctx: Ctx) -> dict:
    """CUDA: the forward is captured in a CUDA graph and its replay on new
    inputs (written into the captured ones) matches the reference; CPU: the
    forward does no host sync, builds no tensor from host data and copies
    nothing across devices (harness.testing.checks.host_work, the CPU proxy)."""
    fwd = ctx.build()
    ctx.forward(fwd)  # warm-up: lazy initialisation and compilation are allowed once
    h, lg = ctx.inst.hidden, ctx.inst.router_logits
    if h.device.type == "cuda":
        sh, sl = h.clone(), lg.clone()
        try:
            with torch.no_grad():
                replay, _ = capture_forward(fwd, sh, sl)
        except Exception as e:
            raise CheckFailed(f"CUDA graph capture of the forward failed: {type(e).__name__}: {str(e)[:300]}",
                              {"error": f"{type(e).__name__}: {str(e)[:300]}", "verdict": IMPL_WRONG}) from None
        inst2 = ctx.inst.with_inputs(h.flip(0), lg.flip(0))
        sh.copy_(inst2.hidden)
        sl.copy_(inst2.router_logits)
        out = replay().clone()
        outside(out, inst2.trace().out, ctx.tolerance(inst2), "CUDA graph replay on new inputs vs the reference")
        return {"mode": "cuda graph"}
    try:
        with torch.no_grad(), no_host_work():
            fwd(h, lg)
    except HostWorkInForward as e:
        raise CheckFailed(f"{e} (on a GPU: a host sync or copy inside CUDA graph capture)",
                          {"error": str(e), "verdict": IMPL_WRONG}) from None
    return {"mode": "cpu proxy"}


def run_equivariance(ctx: Ctx) -> dict:
    """Permuting tokens permutes the output; relabelling experts together with
    the router columns leaves it (each within twice the tolerance)."""
    p = ctx.problem
    g = torch.Generator().manual_seed(p.seed)
    fwd = ctx.build()
    out = ctx.forward(fwd)
    tol = ctx.tolerance()
    dev = ctx.inst.hidden.device
    perm = torch.randperm(p.T, generator=g).to(dev)
    outp = ctx.forward(fwd, ctx.inst.hidden[perm], ctx.inst.router_logits[perm])
    pc = perm.cpu()
    outside(outp, out[perm].cpu().double(), 2 * tol[pc], "token permutation: moe(P x) vs P moe(x)",
            {"permutation": pc.tolist()})
    perm_e = torch.randperm(p.E, generator=g)
    w2 = wt.permute_experts(ctx.inst.weights, perm_e)
    oute = ctx.forward(ctx.build(w2), ctx.inst.hidden, ctx.inst.router_logits[:, perm_e.to(dev)])
    outside(oute, out.cpu().double(), 2 * tol, "expert relabelling (weights and router columns permuted)",
            {"expert_permutation": perm_e.tolist()})
    return {"bitwise": bool(torch.equal(outp, out[perm]) and torch.equal(oute, out))}


def run_shared_weights(ctx: Ctx) -> dict:
    """Two layers built from the same tensors give the same output, before and
    after the second build, and building leaves the tensors' values alone."""
    shared = ctx.inst.weights
    before = {k: v.detach().clone() for k, v in shared.items()}

    def layer():
        return ctx.build(shared)  # every layer from the very same tensors

    f1 = layer()
    o1 = ctx.forward(f1)
    try:
        f2 = layer()
        o2 = ctx.forward(f2)
        o1b = ctx.forward(f1)
    except CheckFailed:
        raise
    except Exception as e:
        raise CheckFailed(f"a second layer built from the same weights fails: {type(e).__name__}: {e}",
                          {"error": f"{type(e).__name__}: {e}", "verdict": IMPL_WRONG}) from None
    changed = [k for k, v in before.items() if not torch.equal(v, shared[k].detach())]
    if changed:
        raise CheckFailed(f"building the layer modified the weights it was given: {changed}",
                          {"modified": changed, "verdict": IMPL_WRONG})
    for what, o in (("second layer", o2), ("first layer after the second was built", o1b)):
        if not torch.equal(o.cpu(), o1.cpu()):
            outside(o, o1.cpu().double(), torch.zeros_like(o1.cpu().double()),
                    f"{what} vs the first layer (bitwise: same weights, same inputs)")
    return {}


def run_offsets(ctx: Ctx) -> dict:
    try:
        res = ctx.impl.probe_large_offsets(str(ctx.inst.hidden.device))
    except AssertionError as e:
        raise CheckFailed(f"expert weights past 2^31 bytes: {e}", {"verdict": IMPL_WRONG}) from None
    return dict(res or {})


# --------------------------------------------------------------------------- the table
def _always(impl, scheme):
    return None


def _act_quantized(impl, scheme):
    return None if scheme.act_fmt is not None else "weight-only scheme: no activation quantization to skip"


def _two_level(impl, scheme):
    return None if scheme.two_level else "single-level scheme: no global scales"


def _has_scales(impl, scheme):
    return None if _scale_probes(scheme) else "the scheme has no global or per-tensor scales"


@dataclass(frozen=True)
class Check:
    name: str
    bug_class: str
    families: tuple            # problem families it runs on (one problem each)
    run: Callable
    applies: Callable = _always  # (impl, scheme row) -> reason it does not apply, or None
    hook: Optional[str] = None   # protocol hook it needs ("not provided" without it)
    per_implementation: bool = False  # runs once per implementation, not per cell
    shrinks: bool = True


CHECKS = (
    Check("oracle", "any numerics bug: the certified float64 reference within the derived tolerance",
          ("random", "edge"), run_oracle),
    Check("ties", "tie rounding (AMD Quark ties away) and routing ties (equal logits -> lowest index)",
          ("ties",), run_ties),
    Check("global_scale", "global-scale conventions (ModelOpt decode side vs compressed-tensors encode side, "
          "per-expert scales; vLLM #35733)", ("spread",), run_global_scale, _two_level),
    Check("scale_use", "scale read from the wrong attribute or defaulted to 1.0 (vLLM #46254 a1_scale / "
          "a1_gscale)", ("random",), run_scale_use, _has_scales),
    Check("silent_skip", "activation quantization silently skipped (vLLM #52704 dtype string not a dispatch key)",
          ("random",), run_silent_skip, _act_quantized),
    Check("double_qdq", "double quantization (vLLM #46254, #46142)", ("random",), run_double_qdq,
          hook="observe_qdq"),
    Check("device", "device lookup through an attribute the layer lacks (vLLM #41630 layer.weight.device)",
          ("random",), run_device),
    Check("capture", "host work in graph capture (vLLM #40033 LUT to device, #46735 tensor truthiness)",
          ("random",), run_capture),
    Check("equivariance", "token order or expert labels leaking into the result", ("distinct",),
          run_equivariance),
    Check("shared_weights", "building a layer mutates shared weights (emulation experts constructor)",
          ("random",), run_shared_weights),
    Check("offsets", "32-bit offset overflow past 2^31 bytes of expert weights (vLLM #44667)", ("random",),
          run_offsets, hook="probe_large_offsets", per_implementation=True, shrinks=False),
)
CHECK_NAMES = tuple(c.name for c in CHECKS)


def get_check(name: str) -> Check:
    for c in CHECKS:
        if c.name == name:
            return c
    raise ValueError(f"unknown MoE check {name!r}; expected one of {', '.join(CHECK_NAMES)}")

