"""Problems an MoE implementation is run on: a recipe (scheme, family, routing,
activation, dtype, sizes, seed) -> hidden, router logits, the ground-truth
quantized weights and scales, the weights in the implementation's conventions
(weights.py), its MoEConfig, and the float64 reference with its derived
tolerance (harness.moe.reference, harness.moe.tolerance).

Families (rows of FAMILIES; harness.strategies.MoEProblem builds the tensors):
    random    grid logits (1/4 apart), expert magnitudes 2^[-2, 2]
    edge      logits with +-1e4 entries (probabilities exactly 0 and 1), expert
              magnitudes 2^[-6, 6], token magnitudes 2^[-12, 2] (two-level
              activations get E4M3-subnormal block scales), activation global
              scales 2x past calibration (saturating)
    ties      logits from {0, 1} (ties: lowest index wins) and, for block-format
              activations, hidden made of exact midpoints between element codes
              (harness.testing.checks.ties.tie_blocks), so RNE and round-away differ
    distinct  every token's logits distinct (expert relabelling is exact)
    spread    expert magnitudes 2^[-6, 6]: per-expert two-level global scales
              2^12 apart, per-expert input scales spread (the layer takes the max)

Two-level global scales are powers of two (the calibrated gs_numerator / amax
rounded down to one), so the decode-side value 1/gs a "decode" implementation
is handed is exact and both conventions describe the same numbers.
"""
from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from typing import Optional

import torch

import harness.formats as hf
from harness.moe import reference as ref
from harness.moe import tolerance as tolm
from harness.moe.activations import ACTIVATIONS
from harness.moe.config import MoEQuantConfig
from harness.moe.schemes import get_scheme
from harness.strategies import MoEProblem
from harness.testing.checks.problem import Truth
from harness.testing.checks.ties import tie_blocks

from harness.conformance.moe.protocol import DTYPE_NAMES, ROUTINGS, MoEConfig
from harness.conformance.moe import weights as wt

F32, F64 = torch.float32, torch.float64


@dataclass(frozen=True)
class Family:
    name: str
    logits: str           # MoEProblem logit style
    spread: int           # expert magnitudes 2^[-spread, spread]
    token_spread: int     # token magnitudes 2^[-token_spread, 2]
    hidden: str           # "random" | "ties"
    act_scale: float = 1.0  # activation global scales / static scales: factor past calibration


FAMILIES = {f.name: f for f in (
    Family("random", "grid", 2, 2, "random"),
    Family("edge", "extreme", 6, 12, "random", act_scale=2.0),
    Family("ties", "ties", 0, 2, "ties"),
    Family("distinct", "distinct", 2, 2, "random"),
    Family("spread", "grid", 6, 2, "random"),
)}


@dataclass(frozen=True)
class Problem:
    """A complete, reproducible recipe; repr() is what a report prints."""

    scheme: str
    family: str
    routing: str
    activation: str
    dtype: str
    E: int
    top_k: int
    H: int
    I: int
    T: int
    seed: int

    def __repr__(self):
        return (f"Problem({self.scheme!r}, family={self.family!r}, routing={self.routing!r}, "
                f"activation={self.activation!r}, dtype={self.dtype!r}, E={self.E}, top_k={self.top_k}, "
                f"H={self.H}, I={self.I}, T={self.T}, seed={self.seed})")

    def replace(self, **kw) -> "Problem":
        return dataclasses.replace(self, **kw)

    @property
    def routing_row(self):
        return ROUTINGS[self.routing]

    def moe_problem(self) -> MoEProblem:
        fam = FAMILIES[self.family]
        r = self.routing_row
        return MoEProblem(self.scheme, self.E, self.top_k, self.H, self.I, self.T, self.seed, scoring=r.scoring,
                          renormalize=r.renormalize, activation=self.activation, logits=fam.logits,
                          spread=fam.spread, token_spread=fam.token_spread, dtype=self.dtype)

    def size(self) -> tuple:
        return (self.T, self.E, self.top_k, self.H, self.I)


def stable_seed(*parts) -> int:
    """A seed from the run seed and a cell's names: the same in every process."""
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def make_problem(scheme, family, routing, activation, dtype, seed, *, E=8, top_k=2, H=64, I=64, T=16) -> Problem:
    if family not in FAMILIES:
        raise ValueError(f"unknown problem family {family!r}; expected one of {list(FAMILIES)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}")
    return Problem(scheme, family, routing, activation, dtype, E, top_k, H, I, T,
                   stable_seed(seed, scheme, family, routing, activation, dtype))


def shrink_candidates(p: Problem, multiple: int) -> list:
    """Smaller problems to try, most aggressive first: fewer tokens, experts,
    selected experts, then fewer hidden and intermediate rows (steps of
    `multiple`, the sizes' required multiple)."""
    out = []
    for T in (1, p.T // 2, p.T - 1):
        if 1 <= T < p.T:
            out.append(p.replace(T=T))
    for E in (p.top_k, p.E // 2, p.E - 1):
        if max(p.top_k, 1) <= E < p.E:
            out.append(p.replace(E=E))
    for k in (1, p.top_k - 1):
        if 1 <= k < p.top_k:
            out.append(p.replace(top_k=k))
    for name in ("H", "I"):
        v = getattr(p, name)
        for n in (multiple, v - multiple):
            if multiple <= n < v:
                out.append(p.replace(**{name: n}))
    seen, uniq = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            uniq.append(c)
    return uniq


# --------------------------------------------------------------------------- truth
def _pow2_floor(x: torch.Tensor) -> torch.Tensor:
    """Largest power of two <= x (float32, x > 0)."""
    m, e = torch.frexp(x.to(F32))
    return torch.ldexp(torch.ones_like(m), e - 1)


def _hidden(p: Problem, t) -> tuple:
    """(hidden, a1 encode-side global scale forced by the family or None)."""
    scheme = get_scheme(p.scheme)
    fam = FAMILIES[p.family]
    if fam.hidden != "ties" or scheme.act_block_fmt is None or p.T == 0:
        return t.hidden, None
    B = hf.FORMATS[scheme.act_block_fmt].block_size
    n = p.T * p.H
    x, gs = tie_blocks(scheme.act_block_fmt, rows=-(-n // (2 * B)), seed=p.seed)
    return x.reshape(-1)[:n].reshape(p.T, p.H).to(DTYPE_NAMES[p.dtype]), gs


def truth_of(p: Problem, t, hidden, forced_a1_gscale=None) -> Truth:
    """Ground-truth quantized weights (round to nearest even) and activation
    scales of a problem: MX weights with the scheme's scale mode; two-level
    weights with per-expert power-of-two global scales; two-level activation
    global scales calibrated on the unquantized forward (gs_numerator / amax,
    times the family's act_scale, rounded down to a power of two); per-tensor
    fp8 activations with static decode-side scales amax / max_normal / act_scale."""
    scheme = get_scheme(p.scheme)
    spec = hf.FORMATS[scheme.weight_fmt]
    fam = FAMILIES[p.family]
    if spec.has_global_scale:
        def qz(w):
            gs = _pow2_floor(hf.nvfp4_global_scale(w.abs().amax(dim=(1, 2)), scheme.weight_fmt))
            return hf.quantize(w, scheme.weight_fmt, global_scale=gs.reshape(-1, 1)), gs
        (w13_q, gs13), (w2_q, gs2) = qz(t.w13), qz(t.w2)
    else:
        w13_q = hf.quantize(t.w13, scheme.weight_fmt, scale_mode=scheme.scale_mode)
        w2_q = hf.quantize(t.w2, scheme.weight_fmt, scale_mode=scheme.scale_mode)
        gs13 = gs2 = None
    tr = Truth(w13_q, w2_q, gs13, gs2)
    if scheme.act_fmt is None:
        return tr
    x = hidden.to(F32)
    a1max = x.abs().amax().double() if x.numel() else torch.zeros((), dtype=F64)
    h = torch.einsum("th,enh->ten", x.double(), t.w13.double())
    g = ref.reference_activation(h, p.activation)
    a2max = g.abs().amax() if g.numel() else torch.zeros((), dtype=F64)
    if scheme.needs_act_gscale:
        num = hf.FORMATS[scheme.act_fmt].gs_numerator

        def gsc(a):
            return _pow2_floor((num / a * fam.act_scale).to(F32)) if a > 0 else torch.ones((), dtype=F32)
        tr.a1_gscale = forced_a1_gscale.to(F32).reshape(()) if forced_a1_gscale is not None else gsc(a1max)
        tr.a2_gscale = gsc(a2max)
    elif scheme.act_per_tensor:
        def dsc(a):
            return (a / hf.E4M3.max_normal / fam.act_scale).to(F32) if a > 0 else torch.ones((), dtype=F32)
        tr.a1_scale, tr.a2_scale = dsc(a1max), dsc(a2max)
    return tr


def reference_config(p: Problem, truth: Truth) -> MoEQuantConfig:
    return MoEQuantConfig(get_scheme(p.scheme), truth.w13_q, truth.w2_q, truth.w13_gscale, truth.w2_gscale,
                          a1_scale=truth.a1_scale, a1_gscale=truth.a1_gscale, a2_scale=truth.a2_scale,
                          a2_gscale=truth.a2_gscale)


# --------------------------------------------------------------------------- instance
@dataclass
class Instance:
    """One materialized problem for one implementation's conventions."""

    problem: Problem
    hidden: torch.Tensor          # [T, H] on the device
    router_logits: torch.Tensor   # [T, E] float32 on the device
    truth: Truth
    weights: dict                 # vLLM names -> tensors on the device (weights.py)
    config: MoEConfig
    _trace: Optional[ref.ReferenceTrace] = None

    @property
    def ref_config(self) -> MoEQuantConfig:
        return reference_config(self.problem, self.truth)

    def trace(self) -> ref.ReferenceTrace:
        if self._trace is None:
            p = self.problem
            r = p.routing_row
            self._trace = ref.reference_moe_trace(self.hidden.cpu(), self.router_logits.cpu(), self.ref_config,
                                                  top_k=p.top_k, renormalize=r.renormalize, scoring=r.scoring,
                                                  activation=p.activation)
        return self._trace

    def tolerance(self, c_prec: float) -> torch.Tensor:
        return tolm.output_tolerance(self.trace(), self.ref_config, activation=self.problem.activation,
                                     out_dtype=DTYPE_NAMES[self.problem.dtype], c_prec=c_prec)

    def with_truth(self, truth: Truth) -> "Instance":
        """The same inputs with other weights / scales (the conventions kept)."""
        truth = wt.recovered_truth(truth, self.config.conventions)
        w = wt.vllm_weights(self.problem, truth, self.config.conventions, self.config.device)
        return dataclasses.replace(self, truth=truth, weights=w, _trace=None)

    def with_inputs(self, hidden, router_logits) -> "Instance":
        return dataclasses.replace(self, hidden=hidden, router_logits=router_logits, _trace=None)


def materialize(p: Problem, conventions: dict, device="cpu") -> Instance:
    scheme = get_scheme(p.scheme)
    t = p.moe_problem().tensors()
    hidden, forced = _hidden(p, t)
    truth = truth_of(p, t, hidden, forced)
    r = p.routing_row
    cfg = MoEConfig(scheme=scheme.name, weight_format=scheme.weight_fmt, activation_format=scheme.act_fmt,
                    scale_mode=scheme.scale_mode, num_experts=p.E, top_k=p.top_k, hidden_size=p.H,
                    intermediate_size=p.I, routing=p.routing, scoring=r.scoring, renormalize=r.renormalize,
                    activation=p.activation, dtype=DTYPE_NAMES[p.dtype], device=str(device),
                    conventions=dict(conventions))
    return Instance(p, hidden.to(device), t.router_logits.to(device), truth,
                    wt.vllm_weights(p, truth, conventions, device), cfg)


def scaled_truth(truth: Truth, name: str, factor: float) -> Truth:
    """A copy of `truth` with one scale multiplied by `factor`."""
    v = getattr(truth, name)
    return dataclasses.replace(truth, **{name: (v.double() * factor).to(F32)})


def without_act_qdq(cfg: MoEQuantConfig) -> MoEQuantConfig:
    """The reference config with activation quantization removed (what a
    layer that silently skips it computes)."""
    s = dataclasses.replace(get_scheme(cfg.scheme), act_fmt=None, quant_dtype=None, needs_act_gscale=False)
    return dataclasses.replace(cfg, scheme=s, a1_scale=None, a2_scale=None, a1_gscale=None, a2_gscale=None)

