"""Public hypothesis strategies, derived from the format table.

Every strategy reads its limits from `harness.formats.FORMATS`, so a new format
row is covered without touching this file. Tensors are built from small
integer draws (a mantissa per element, an exponent per block) so hypothesis
shrinks a failure towards one block of small, readable values.

    import harness.strategies as hs
    @given(hs.block_tensors("mxfp4"))          # or block_tensors() for any format
    def test_x(case): case.x, case.fmt ...

Block kinds (one drawn per block):
    random     mantissas times 2^e, e anywhere the dtype can hold (2^-126..2^127 in fp32)
    ties       exact midpoints between adjacent element codes (k + 0.5 code steps)
               times a power-of-two block scale, anchored by +-max_normal
    zero       an all-zero block (signed zeros included)
    subnormal  float32 subnormals (fp32/bf16 only)
    max        values at max_normal, just past it, and far past it, times 2^e
    special    NaN / +-Inf mixed into a random block (only with allow_nan_inf)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from hypothesis import strategies as st

from harness.formats import FORMATS, NVFP4_GS_NUMERATOR, ROUNDINGS, SCALE_MODES, decode_value, get_format
from harness.formats.spec import FormatSpec
from harness.moe.arch import ROUTING_ROWS, MoEArch
from harness.moe.schemes import SCHEME_NAMES
from harness.moe.schemes import get_scheme

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BLOCK_KINDS = ("random", "ties", "zero", "subnormal", "max")

# Binade range each input dtype can hold, normal numbers (min exp, max exp).
_DTYPE_EXP = {torch.float32: (-126, 127), torch.bfloat16: (-126, 127), torch.float16: (-14, 15)}
_DTYPE_MANT = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}


@dataclass
class BlockCase:
    """A drawn input: x [rows, blocks*block] of `dtype`, plus the kinds drawn."""

    x: torch.Tensor
    fmt: str
    kinds: tuple

    def __repr__(self):  # what a failing example prints: small and complete
        torch.set_printoptions(precision=10, threshold=10_000)
        return f"BlockCase(fmt={self.fmt!r}, dtype={self.x.dtype}, shape={tuple(self.x.shape)}, kinds={self.kinds},\n  x={self.x!r})"


def formats(names=None):
    """Format names: `names`, or every row of the table as it is now."""
    return st.sampled_from(tuple(FORMATS if names is None else names))


def mx_formats():
    return formats(tuple(n for n, f in FORMATS.items() if f.is_mx))


def scale_modes():
    return st.sampled_from(SCALE_MODES)


def roundings():
    return st.sampled_from(ROUNDINGS)


def dtypes(allowed=DTYPES):
    return st.sampled_from(tuple(allowed))


def global_scales(allow_none: bool = True, fmt=None):
    """Encode-side global scales of a two-level row (nvfp4 when fmt is None):
    gs_numerator/amax (2688/amax for nvfp4) for amax over a wide range, exact
    powers of two, and None (meaning 1.0)."""
    numerator = NVFP4_GS_NUMERATOR if fmt is None else get_format(fmt).gs_numerator
    from_amax = st.floats(min_value=2.0**-20, max_value=2.0**20, allow_nan=False, allow_infinity=False).map(
        lambda a: float(torch.tensor(numerator, dtype=torch.float32) / torch.tensor(a, dtype=torch.float32))
    )
    pow2 = st.integers(-20, 20).map(lambda e: math.ldexp(1.0, e))
    choices: list[st.SearchStrategy[float | None]] = [from_amax, pow2]
    if allow_none:
        choices.append(st.none())
    return st.one_of(*choices)


def _tie_values(spec: FormatSpec):
    """Midpoints between adjacent non-negative finite element values."""
    el = spec.element
    vals = sorted({decode_value(el, c) for c in range(el.sign_bit) if math.isfinite(decode_value(el, c))})
    return [(a + b) / 2 for a, b in zip(vals, vals[1:])]


@st.composite
def _block(draw, spec: FormatSpec, dtype, allow_nan_inf: bool):
    kinds = BLOCK_KINDS + (("special",) if allow_nan_inf else ())
    if dtype == torch.float16:
        kinds = tuple(k for k in kinds if k != "subnormal")
    kind = draw(st.sampled_from(kinds))
    n = spec.block_size
    lo, hi = _DTYPE_EXP[dtype]
    mant_bits = _DTYPE_MANT[dtype]
    if kind == "zero":
        signs = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        return kind, [-0.0 if s else 0.0 for s in signs]
    if kind == "subnormal":
        ints = draw(st.lists(st.integers(-(2**23 - 1), 2**23 - 1), min_size=n, max_size=n))
        return kind, [math.ldexp(i, -149) for i in ints]
    if kind == "ties":
        ties = _tie_values(spec)
        # Keep the block exponent where anchor and ties stay normal in the dtype.
        e = draw(st.integers(max(lo + 12, -100), min(hi - spec.emax - 1, 100)))
        picks = draw(st.lists(st.tuples(st.sampled_from(ties), st.booleans()), min_size=n - 1, max_size=n - 1))
        anchor = draw(st.booleans())
        vals = [(-t if neg else t) for t, neg in picks] + [(-1.0 if anchor else 1.0) * spec.max_normal]
        order = draw(st.permutations(range(n)))
        return kind, [math.ldexp(vals[i], e) for i in order]
    if kind == "max":
        e = draw(st.integers(max(lo, -100), min(hi - spec.emax - 2, 100)))
        m = spec.max_normal
        candidates = [m, -m, m * (1 + 2.0**-mant_bits), m * 1.5, -m * 1.25, m / 2, m * (1 - 2.0**-mant_bits)]
        vals = draw(st.lists(st.sampled_from(candidates), min_size=n, max_size=n))
        return kind, [math.ldexp(v, e) for v in vals]
    # random / special
    e = draw(st.integers(lo, hi))
    ints = draw(st.lists(st.integers(-(2**mant_bits), 2**mant_bits), min_size=n, max_size=n))
    vals = [math.ldexp(i, e - mant_bits) for i in ints]
    if kind == "special":
        where = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
        for w in where:
            vals[w] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return kind, vals


@st.composite
def block_tensors(draw, fmt=None, dtypes=DTYPES, allow_nan_inf: bool = False, max_rows: int = 3, max_blocks: int = 3):
    """A float tensor [rows, k*block] in one of `dtypes`, blocks of mixed kinds."""
    name = fmt if fmt is not None else draw(formats())
    spec = FORMATS[name]
    dtype = draw(st.sampled_from(tuple(dtypes)))
    rows = draw(st.integers(1, max_rows))
    nblocks = draw(st.integers(1, max_blocks))
    kinds, values = [], []
    for _ in range(rows * nblocks):
        kind, vals = draw(_block(spec, dtype, allow_nan_inf))
        kinds.append(kind)
        values.extend(vals)
    x = torch.tensor(values, dtype=torch.float64).to(torch.float32).to(dtype)
    return BlockCase(x=x.reshape(rows, nblocks * spec.block_size), fmt=name, kinds=tuple(kinds))


@st.composite
def finite_float32(draw, lo_exp: int = -149, hi_exp: int = 127):
    """Any finite float32 by its bit pattern (uniform over encodings)."""
    bits = draw(st.integers(0, 0x7F7FFFFF))
    sign = draw(st.booleans())
    v = torch.tensor([bits | (0x80000000 if sign else 0)], dtype=torch.int64).to(torch.int32).view(torch.float32)
    return float(v)


# ==== moe_problems: MoE problem strategy ====
# `moe_problems()`: a whole quantized-MoE problem as one hypothesis draw.
#
# Hypothesis draws only small integers and choices (sizes first, so a failure
# shrinks towards few tokens / experts / small blocks, then a seed and the knobs);
# the tensors are generated from the seed with torch.Generator, which is fast and
# keeps the printed example short: the repr is the complete recipe.
#
#     @given(moe_problems())                     # any scheme
#     @given(moe_problems(scheme="nvfp4"))       # one scheme
#     def test_x(p): t = p.tensors(); t.hidden, t.router_logits, t.w13, t.w2 ...
#
# Router logits (`logits=`):
#     grid      multiples of 1/4 in [-8, 8]: distinct values are >= 1/4 apart, so
#               float32 and float64 scores order them identically (no near-ties)
#     ties      values from {0, 1}: many exact ties (lowest expert index wins)
#     extreme   grid plus +-1e4 entries: probabilities that are exactly 0 / 1
#               in float32 AND float64 (ties again, never near-ties). With
#               sigmoid + renormalize only +1e4 (all-zero selected scores would
#               make the renormalization 0/0)
#     distinct  every row a permutation of distinct grid values (no ties at all:
#               for properties that relabel experts)
# Expert weights: randn / sqrt(K) times a per-expert power of two in
# [2^-spread, 2^spread]. Hidden: randn times a per-token power of two in
# [2^-token_spread, 2^2], in float32 or bfloat16 (`dtype`; the layer computes in
# float32 and returns hidden's dtype); token_spread = 12 puts small tokens 2^14 below the
# largest, where a calibrated NVFP4 global scale gives them E4M3-SUBNORMAL block
# scales (few-bit block scales: the regime where NVFP4 QDQ can be non-idempotent).
# NVFP4 checkpoints come in either convention (`ckpt`): ModelOpt (decode-side
# weight_scale_2 = amax/2688) or compressed-tensors (encode-side global_scale).
# Activation scales: nvfp4 a1/a2_gscale calibrated (2688/amax of the unquantized
# float64 forward's GEMM inputs) times `act_scale`; fp8 static decode-side
# scales amax/448 times 1/act_scale, or dynamic (None) when act_scale == 0.
#
# Architecture (harness.moe.arch): a routing row of ROUTING_ROWS is drawn (a new
# row is drawn without touching this file): its scorings, group-limited
# selection (n_group a divisor of E, topk_group, top_k <= the kept groups'
# experts), a score-correction bias (multiples of 1/32 in [-1/2, 1/2]; with
# "ties" logits multiples of 1/4 in [0, 1/4]: exact ties of the float32 keys),
# a routed scaling factor, the router weight on the input (top_k 1).
# Independently: expert biases (randn * 2^expert_bias; None = none) and a shared
# MLP of intermediate size `shared` (0 = none). Their tensors are drawn after
# the others, so a problem without them has the tensors it always had.

MOE_BLOCK = max(f.block_size for f in FORMATS.values())  # a multiple of every block size (nvfp4 16, MX 32)
MOE_LOGIT_STYLES = ("grid", "ties", "extreme", "distinct")
MOE_ACT_SCALES = (1.0, 0.37, 2.9)  # calibration factor (1 = calibrated)
MOE_ROUTED_SCALINGS = (2.5, 0.37, 16.0)  # DeepSeek-V3's 2.5, and far from 1 both ways
MOE_BIAS_EXPS = (-4, 0, 3)  # expert-bias magnitudes 2^e relative to the GEMM outputs (~1)


def _moe_scheme_names():
    return SCHEME_NAMES


def _moe_scheme(name):
    return get_scheme(name)


@dataclass
class MoETensors:
    hidden: torch.Tensor  # float32 or bfloat16 [T, H]
    router_logits: torch.Tensor  # float32 [T, E]
    w13: torch.Tensor  # float32 [E, 2I, H], gate then up
    w2: torch.Tensor  # float32 [E, H, I]
    e_score_correction_bias: Optional[torch.Tensor] = None  # float32 [E]
    w13_bias: Optional[torch.Tensor] = None  # float32 [E, 2I]
    w2_bias: Optional[torch.Tensor] = None  # float32 [E, H]
    shared_w13: Optional[torch.Tensor] = None  # float32 [2S, H]
    shared_w2: Optional[torch.Tensor] = None  # float32 [H, S]


@dataclass(frozen=True)
class MoEProblem:
    scheme: str
    E: int
    top_k: int
    H: int
    I: int
    T: int
    seed: int
    scoring: str = "softmax"
    renormalize: bool = True
    activation: str = "silu"
    logits: str = "grid"
    spread: int = 0
    ckpt: str = "native"  # nvfp4: "modelopt" | "compressed_tensors"
    act_scale: float = 1.0  # nvfp4 gscale factor; fp8: 0 = dynamic, else static
    token_spread: int = 2  # token magnitudes 2^[-token_spread, 2]
    dtype: str = "float32"  # hidden's dtype: "float32" | "bfloat16"
    # architecture (harness.moe.arch.MoEArch; defaults: none of it)
    n_group: int = 1
    topk_group: int = 1
    routed_scaling: float = 1.0
    score_correction: bool = False
    weight_on_input: bool = False
    expert_bias: Optional[int] = None  # biases randn * 2^expert_bias; None = no biases
    shared: int = 0  # shared MLP intermediate size S; 0 = no shared experts

    _ARCH_DEFAULTS = (("n_group", 1), ("topk_group", 1), ("routed_scaling", 1.0), ("score_correction", False),
                      ("weight_on_input", False), ("expert_bias", None), ("shared", 0))

    def __repr__(self):
        extra = "".join(f", {name}={getattr(self, name)!r}" for name, default in self._ARCH_DEFAULTS
                        if getattr(self, name) != default)
        return (
            f"MoEProblem({self.scheme!r}, E={self.E}, top_k={self.top_k}, H={self.H}, I={self.I}, "
            f"T={self.T}, seed={self.seed}, scoring={self.scoring!r}, renormalize={self.renormalize}, "
            f"activation={self.activation!r}, logits={self.logits!r}, spread={self.spread}, "
            f"ckpt={self.ckpt!r}, act_scale={self.act_scale}, token_spread={self.token_spread}, dtype={self.dtype!r}"
            f"{extra})"
        )

    @property
    def arch(self) -> MoEArch:
        """The layer's architecture row."""
        return MoEArch(top_k=self.top_k, scoring=self.scoring, renormalize=self.renormalize,
                       activation=self.activation, n_group=self.n_group, topk_group=self.topk_group,
                       routed_scaling_factor=self.routed_scaling, score_correction=self.score_correction,
                       router_weight_on_input=self.weight_on_input, expert_bias=self.expert_bias is not None,
                       shared_experts=self.shared > 0)

    def _repr_pretty_(self, p, cycle):  # hypothesis' failure printout: the one-line recipe
        p.text(repr(self))

    def replace(self, **kw) -> "MoEProblem":
        from dataclasses import replace

        return replace(self, **kw)

    def tensors(self) -> MoETensors:
        g = torch.Generator().manual_seed(self.seed)
        T, E, H, I = self.T, self.E, self.H, self.I
        tok = torch.ldexp(torch.ones(T, 1), torch.randint(-self.token_spread, 3, (T, 1), generator=g).float())
        hidden = (torch.randn(T, H, generator=g) * tok).to(getattr(torch, self.dtype))
        s = self.spread
        e13 = torch.randint(-s, s + 1, (E, 1, 1), generator=g).float()
        e2 = torch.randint(-s, s + 1, (E, 1, 1), generator=g).float()
        w13 = torch.randn(E, 2 * I, H, generator=g) / math.sqrt(H) * torch.ldexp(torch.ones(E, 1, 1), e13)
        w2 = torch.randn(E, H, I, generator=g) / math.sqrt(I) * torch.ldexp(torch.ones(E, 1, 1), e2)
        t = MoETensors(hidden, self._logits(g), w13, w2)
        # The architecture's tensors come after: a problem without them keeps its tensors.
        if self.score_correction:
            if self.logits == "ties":
                t.e_score_correction_bias = torch.randint(0, 2, (E,), generator=g).float() / 4
            else:
                t.e_score_correction_bias = torch.randint(-16, 17, (E,), generator=g).float() / 32
        if self.expert_bias is not None:
            f = math.ldexp(1.0, self.expert_bias)
            t.w13_bias = torch.randn(E, 2 * I, generator=g) * f
            t.w2_bias = torch.randn(E, H, generator=g) * f
        if self.shared:
            S = self.shared
            t.shared_w13 = torch.randn(2 * S, H, generator=g) / math.sqrt(H)
            t.shared_w2 = torch.randn(H, S, generator=g) / math.sqrt(S)
        return t

    def _logits(self, g) -> torch.Tensor:
        T, E = self.T, self.E
        if self.logits == "ties":
            return torch.randint(0, 2, (T, E), generator=g).float()
        if self.logits == "distinct":
            vals = torch.arange(-32, 33, dtype=torch.float32) / 4  # 65 distinct values
            rows = [vals[torch.randperm(65, generator=g)[:E]] for _ in range(T)]
            return torch.stack(rows) if rows else torch.zeros(0, E)
        grid = torch.randint(-32, 33, (T, E), generator=g).float() / 4
        if self.logits == "extreme":
            where = torch.rand(T, E, generator=g) < 0.3
            sign = torch.where(torch.rand(T, E, generator=g) < 0.5, 1.0, -1.0)
            if self.scoring == "sigmoid" and self.renormalize:
                sign = torch.ones_like(sign)
            grid = torch.where(where, sign * 1e4, grid)
        return grid


def _divisors(n: int) -> list:
    return [d for d in range(2, n + 1) if n % d == 0]


@st.composite
def moe_problems(draw, scheme=None, *, max_experts: int = 64, max_tokens: int = 256, max_hidden: int = 2,
                 max_inter: int = 2, logits=None, activation=None, scoring=None, schemes=None, routings=None,
                 extras: bool = True):
    """A `MoEProblem`; sizes are drawn first so failures shrink to small problems.

    H = 32 * [1..max_hidden], I = 32 * [1..max_inter] (32 = a multiple of every
    block size). T in [0, max_tokens], mostly small (a quarter of draws use the
    full range). `routings`: names of harness.moe.arch.ROUTING_ROWS to draw
    from (default all; plain "topk" in a third of draws); `scoring` keeps the
    rows that take it. `extras`: expert biases and shared experts drawn too."""
    E = draw(st.integers(1, max_experts))
    names = tuple(routings) if routings is not None else tuple(ROUTING_ROWS)
    rows = [ROUTING_ROWS[n] for n in names if scoring is None or scoring in ROUTING_ROWS[n].scorings]
    if not rows:
        raise ValueError(f"no routing row of {names} takes scoring {scoring!r}")
    weighted = rows + [r for r in rows if r.name == "topk"] * max(1, len(rows) // 2 - 1)
    row = draw(st.sampled_from(weighted))
    n_group, topk_group = 1, 1
    if row.grouped and E > 1:
        n_group = draw(st.sampled_from(_divisors(E)))
        topk_group = draw(st.integers(1, n_group))
    top_k = 1 if row.weight_on_input else draw(st.integers(1, min(E, 8, topk_group * (E // n_group))))
    H = MOE_BLOCK * draw(st.integers(1, max_hidden))
    I = MOE_BLOCK * draw(st.integers(1, max_inter))
    T = draw(st.one_of(st.integers(0, min(16, max_tokens)), st.integers(0, max_tokens)))
    if scheme is None:
        scheme = draw(st.sampled_from(tuple(schemes or _moe_scheme_names())))
    seed = draw(st.integers(0, 2**31 - 1))
    scoring = scoring or draw(st.sampled_from(row.scorings))
    renormalize = row.renormalize if row.renormalize is not None else draw(st.booleans())
    activation = activation or draw(st.sampled_from(("silu", "swiglu_clamp")))
    style = logits or draw(st.sampled_from(MOE_LOGIT_STYLES))
    spread = draw(st.sampled_from((0, 2, 6)))
    token_spread = draw(st.sampled_from((2, 12)))
    dtype = draw(st.sampled_from(("float32", "float32", "float32", "bfloat16")))  # bf16 in 1/4 of draws:
    # its output rounding (2^-9 relative) dominates the tolerance, so it tests less
    ckpt, act_scale = "native", 1.0
    row_s = _moe_scheme(scheme)
    if row_s.two_level:
        ckpt = draw(st.sampled_from(("modelopt", "compressed_tensors")))
        act_scale = draw(st.sampled_from(MOE_ACT_SCALES))
    elif row_s.act_per_tensor:
        act_scale = draw(st.sampled_from((0.0,) + MOE_ACT_SCALES))
    routed_scaling = draw(st.sampled_from(MOE_ROUTED_SCALINGS)) if row.routed_scaling else 1.0
    expert_bias, shared = None, 0
    if extras:
        expert_bias = draw(st.sampled_from((None, None) + MOE_BIAS_EXPS))
        shared = draw(st.sampled_from((0, 0, MOE_BLOCK, 2 * MOE_BLOCK)))
    return MoEProblem(scheme, E, top_k, H, I, T, seed, scoring, renormalize, activation, style, spread,
                      ckpt, act_scale, token_spread, dtype, n_group=n_group, topk_group=topk_group,
                      routed_scaling=routed_scaling, score_correction=row.score_correction,
                      weight_on_input=row.weight_on_input, expert_bias=expert_bias, shared=shared)
# ==== end of moe_problems ====
