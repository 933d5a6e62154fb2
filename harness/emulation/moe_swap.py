"""Find the sparse-MoE blocks of a transformers causal LM and swap them for
harness.moe emulation layers.

Which module is a sparse-MoE block, and where its router, experts, biases and
shared expert live, is one row of harness/emulation/families.py per
`config.model_type` (its docstring holds the layout facts, read from the
installed transformers source). The extraction turns every layout into the
emulation layer's: w13 [E, 2I, H] gate rows then up rows, w2 [E, H, I]
(transposed layouts transposed back, interleaved gate/up rows
de-interleaved), and the row's routing, activation and shared-expert options
into `build_emulated_moe` keyword arguments. The replacement block computes
the router logits with the block's own router weight (and bias), in the
dtype the family's router uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from harness.emulation import families
from harness.kernels import fused_gemm as fused_kernels
from harness.moe import activations
from harness.moe.config import require_codes
from harness.moe.reference import reference_moe_trace
from harness.moe.tolerance import output_tolerance
from harness.moe.reference import qdq_activation


# The options of MoEBlockSpec.options that FusedMoE itself takes (the rest are
# weights: expert biases and the shared expert go into the experts objects).
ROUTING_KEYS = ("renormalize", "scoring", "activation", "n_group", "topk_group", "routed_scaling_factor",
                "e_score_correction_bias", "router_weight_on_input")


@dataclass
class MoEBlockSpec:
    name: str                    # dotted module path, e.g. "model.layers.0.mlp"
    family: str                  # the config's model_type (a row of families.FAMILIES)
    router_weight: torch.Tensor  # [E, H]
    top_k: int
    w13: torch.Tensor | None = None  # [E, 2I, H] gate then up (None: experts come from a checkpoint)
    w2: torch.Tensor | None = None   # [E, H, I]
    options: dict = field(default_factory=dict)  # build_emulated_moe keywords: routing, activation, biases, shared
    router_bias: torch.Tensor | None = None      # [E], added to the logits
    router_fp32: bool = False                    # logits in float32 whatever the model dtype
    shared_expert: nn.Module | None = None       # kept outside the layer (gated shared expert)
    shared_expert_gate: nn.Module | None = None
    returns_router: bool = False                 # forward returns (hidden, router logits)

    def routing_options(self) -> dict:
        """FusedMoE keywords of the block (ROUTING_KEYS)."""
        return {k: v for k, v in self.options.items() if k in ROUTING_KEYS}

    @property
    def renormalize(self) -> bool:
        return bool(self.options["renormalize"])

    @property
    def num_experts(self) -> int:
        return self.router_weight.shape[0]

    @property
    def hidden(self) -> int:
        return self.router_weight.shape[1]

    @property
    def intermediate(self) -> int:
        return self.w2.shape[2]


def deinterleave(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Alternating gate/up entries along `dim` (gate_0, up_0, gate_1, ...) ->
    all gate entries, then all up entries."""
    n = t.shape[dim]
    idx = torch.cat([torch.arange(0, n, 2), torch.arange(1, n, 2)]).to(t.device)
    return t.index_select(dim, idx)


def _stack_experts(experts: nn.ModuleList, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    first = experts[0]
    for g, u, d in families.PER_EXPERT_NAMES:
        if all(hasattr(first, a) for a in (g, u, d)):
            w13 = torch.stack([torch.cat([getattr(e, g).weight, getattr(e, u).weight], dim=0) for e in experts])
            return w13.detach(), torch.stack([getattr(e, d).weight for e in experts]).detach()
    raise TypeError(f"{name}.experts: unknown per-expert layout {type(first).__name__} "
                    f"(known: {', '.join('/'.join(n) for n in families.PER_EXPERT_NAMES)})")


def _attr(obj, attr: str, what: str):
    if not hasattr(obj, attr):
        raise TypeError(f"{what}: no attribute {attr!r} ({type(obj).__name__})")
    return getattr(obj, attr)


def _expert_tensors(row: families.Family, block: nn.Module, name: str):
    """(w13 [E, 2I, H] gate-then-up, w2 [E, H, I], w13_bias [E, 2I] | None, w2_bias [E, H] | None)."""
    experts = _attr(block, row.experts, name)
    where = f"{name}.{row.experts}"
    if isinstance(experts, nn.ModuleList):
        w13, w2 = _stack_experts(experts, where)
        b13 = b2 = None
    else:
        w13 = _attr(experts, row.gate_up, where).detach()
        w2 = _attr(experts, row.down, where).detach()
        if w13.dim() != 3 or w2.dim() != 3:
            raise TypeError(f"{where}: {row.gate_up} {tuple(w13.shape)} and {row.down} {tuple(w2.shape)} "
                            "must be 3-D [E, ...]")
        if row.transposed:
            w13, w2 = w13.transpose(1, 2), w2.transpose(1, 2)
        b13 = _attr(experts, row.gate_up_bias, where).detach() if row.gate_up_bias else None
        b2 = _attr(experts, row.down_bias, where).detach() if row.down_bias else None
        if row.interleaved:
            w13 = deinterleave(w13, 1)
            b13 = None if b13 is None else deinterleave(b13, 1)
    E, I2, H = w13.shape
    if I2 % 2 or tuple(w2.shape) != (E, H, I2 // 2):
        raise TypeError(f"{where}: gate_up {tuple(w13.shape)} and down {tuple(w2.shape)} are not "
                        "[E, 2I, H] and [E, H, I] after the family's layout")
    if b13 is not None and tuple(b13.shape) != (E, I2):
        raise TypeError(f"{where}.{row.gate_up_bias}: shape {tuple(b13.shape)}, expected {(E, I2)}")
    if b2 is not None and tuple(b2.shape) != (E, H):
        raise TypeError(f"{where}.{row.down_bias}: shape {tuple(b2.shape)}, expected {(E, H)}")
    return w13.contiguous(), w2.contiguous(), b13, b2


def _activation(row: families.Family, config, name: str, block: nn.Module) -> str:
    cfg = families.text_config(config)
    if row.activation is None:
        act = getattr(cfg, "hidden_act", "silu")
        if act not in families.HIDDEN_ACTS:
            raise TypeError(f"{name}: hidden_act {act!r} is not supported by the emulation layer "
                            f"(known: {', '.join(families.HIDDEN_ACTS)})")
        return families.HIDDEN_ACTS[act]
    experts = getattr(block, row.experts, None)
    for mod_attr, cfg_attr, const in row.activation_params:
        want = getattr(activations, const)
        got, where = getattr(experts, mod_attr, None), f"{name}.{row.experts}.{mod_attr}"
        if got is None:
            got, where = getattr(cfg, cfg_attr, None), f"config.{cfg_attr}"
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or float(got) != float(want):
            raise TypeError(f"{name}: {where} = {got!r}; the emulation layer's {row.activation} uses {want} "
                            f"(read from {name}.{row.experts}.{mod_attr}, else config.{cfg_attr})")
    return row.activation


def _shared_weights(mlp: nn.Module, row: families.Family, name: str):
    g, u, d = (_attr(mlp, a, f"{name}.{row.shared}") for a in row.shared_names)
    return torch.cat([g.weight, u.weight], dim=0).detach(), d.weight.detach()


def _block_spec(name: str, block: nn.Module, row: families.Family, config) -> MoEBlockSpec:
    router = _attr(block, row.router, name)
    rname = f"{name}.{row.router}"
    w13, w2, b13, b2 = _expert_tensors(row, block, name)
    opts = dict(renormalize=bool(families.resolve(row.renormalize, config, rname)), scoring=row.scoring,
                activation=_activation(row, config, name, block))
    if row.correction_bias:
        opts["e_score_correction_bias"] = _attr(router, row.correction_bias, rname).detach()
    if row.n_group is not None:
        opts["n_group"] = int(families.resolve(row.n_group, config, rname))
        opts["topk_group"] = int(families.resolve(row.topk_group, config, rname))
    if row.routed_scaling_factor is not None:
        opts["routed_scaling_factor"] = float(families.resolve(row.routed_scaling_factor, config, rname))
    if row.weight_on_input:
        opts["router_weight_on_input"] = True
    if b13 is not None:
        opts["w13_bias"] = b13
    if b2 is not None:
        opts["w2_bias"] = b2
    shared = gate = None
    if row.shared:
        mlp = _attr(block, row.shared, name)
        if row.shared_gate:
            shared, gate = mlp, _attr(block, row.shared_gate, name)
        else:
            opts["shared_w13"], opts["shared_w2"] = _shared_weights(mlp, row, name)
    weight = _attr(router, "weight", rname).detach()
    if tuple(weight.shape) != (w13.shape[0], w13.shape[2]):
        raise TypeError(f"{rname}.weight: shape {tuple(weight.shape)}, expected [E, H] = "
                        f"{(w13.shape[0], w13.shape[2])}")
    return MoEBlockSpec(
        name=name, family=row.model_type, router_weight=weight,
        top_k=int(families.resolve(families.TOP_K, config, rname)), w13=w13, w2=w2, options=opts,
        router_bias=_attr(router, row.router_bias, rname).detach() if row.router_bias else None,
        router_fp32=row.router_fp32, shared_expert=shared, shared_expert_gate=gate,
        returns_router=row.returns_router,
    )


def find_moe_blocks(model: nn.Module) -> list[MoEBlockSpec]:
    """One spec per module of the family row's block class, in module order."""
    config = getattr(model, "config", None)
    row = families.family_of(config, type(model).__name__)
    specs = [_block_spec(name, module, row, config) for name, module in model.named_modules()
             if type(module).__name__ == row.block_class]
    if not specs:
        raise TypeError(f"{type(model).__name__}: no sparse-MoE blocks found ({row.model_type}: "
                        f"no {row.block_class} module)")
    return specs


class EmulatedSparseMoeBlock(nn.Module):
    """Drop-in for a transformers sparse-MoE block: router logits from the
    block's router weight (and bias), experts through a harness.moe emulation
    layer; returns what the family's block returns."""

    def __init__(self, spec: MoEBlockSpec, emulated: nn.Module, scheme: str):
        super().__init__()
        self.spec_name = spec.name
        self.scheme = scheme
        self.router_weight = nn.Parameter(spec.router_weight, requires_grad=False)
        self.router_bias = None if spec.router_bias is None else nn.Parameter(spec.router_bias, requires_grad=False)
        self.router_fp32 = spec.router_fp32
        self.returns_router = spec.returns_router
        self.emulated = emulated
        self.shared_expert = spec.shared_expert
        self.shared_expert_gate = spec.shared_expert_gate

    def forward(self, hidden_states: torch.Tensor):
        if hidden_states.is_cuda:
            # Triton launches on the CURRENT device, not the tensors': with the
            # layers spread over GPUs (accelerate hooks move tensors, not the
            # current device) the block's kernels must run under its own device.
            with torch.cuda.device(hidden_states.device):
                return self._forward(hidden_states)
        return self._forward(hidden_states)

    def router_logits(self, h: torch.Tensor) -> torch.Tensor:
        dt = torch.float32 if self.router_fp32 else h.dtype
        bias = None if self.router_bias is None else self.router_bias.to(dt)
        return nn.functional.linear(h.to(dt), self.router_weight.to(dt), bias)

    def _forward(self, hidden_states: torch.Tensor):
        shape = hidden_states.shape
        h = hidden_states.reshape(-1, shape[-1])
        router_logits = self.router_logits(h)
        out = self.emulated(h, router_logits).to(hidden_states.dtype)
        if self.shared_expert is not None:
            shared = self.shared_expert(h)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(h)) * shared
            out = out + shared
        out = out.reshape(shape)
        return (out, router_logits) if self.returns_router else out


class OracleMoE(nn.Module):
    """The scheme's numerics spec for one MoE block, as a distribution the
    emulation layer should produce: the kl_oracle gate's reference.

    The spec does not fix one float32 result: the layer may sum its float32
    GEMMs in any order, and those roundings can flip an activation code at a
    rounding tie (QDQ #2 inside the block; QDQ #1 of the NEXT block, whose
    input carries this block's rounding). A plain float64 reference turns
    such a legitimate flip into a full quantization step that cascades
    through the model: one flipped code gave KL 0.0994 on one token, and
    whether a tie is hit depends on which CPU kernels (AVX2 vs AVX-512) did
    the float32 sums. So the oracle certifies instead of recomputing: on its
    own input it runs the float64 reference (`reference_moe_trace`,
    independent of the layer's code) and the emulation layer, and takes the
    layer's output wherever it lies within the derived float32 tolerance of
    the reference (harness.moe.tolerance.output_tolerance: GEMM summation
    bounds plus every QDQ output reachable from inputs within them), and the
    reference's value wherever it does not. Two exact conditions come
    first, as in `moe-harness run`'s MoE checks: the layer's QDQ #1 output
    equals the reference's bit for bit, and its QDQ #2 output is the spec's
    quantizer applied to its own QDQ #2 input; a token that breaks either is
    outside whatever its output error (a skipped per-tensor fp8 QDQ can hide
    inside the tolerance's coarse fp8 interval). The family's options come
    from the layer itself (`FusedMoE.reference_kwargs`: the routing row,
    e_score_correction_bias, the shared expert's quant config; expert biases
    ride in the quant config), and the shared expert's two QDQs are held to
    the same exact conditions as the routed experts'. A correct layer therefore
    gives an oracle run identical to the emulated run (KL exactly 0 on every
    machine); every element outside moves the oracle to the spec and shows up
    in the KL and in `stats`."""

    def __init__(self, fused: nn.Module):
        super().__init__()
        require_codes(fused.quant_config, "the certified oracle (OracleMoE, the kl_oracle gate)")
        require_codes(fused.shared_quant_config, "the certified oracle (OracleMoE, the kl_oracle gate)")
        self.fused = fused
        self.stats = new_oracle_stats()

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        f = self.fused
        qc = f.quant_config
        trace = reference_moe_trace(hidden, router_logits, qc, **f.reference_kwargs())
        # one pass per experts object: the routed experts, and the shared
        # expert where the layer holds one (its own quant config, k = 1)
        passes = [(f.experts, trace, qc)]
        if f.shared_experts is not None:
            passes.append((f.shared_experts, trace.shared, f.shared_quant_config))
        seen = [{} for _ in passes]
        for (experts, _, _), s in zip(passes, seen):
            experts.trace = s
        try:
            layer = f(hidden, router_logits)
        finally:
            for experts, _, _ in passes:
                experts.trace = None
        T = trace.ids.shape[0]
        a1_bad = torch.zeros(T, dtype=torch.bool)
        a2_bad = torch.zeros(T, dtype=torch.bool)
        for (_, tr, cfg), s in zip(passes, seen):
            a1_bad |= (s["a1"].detach().cpu().to(torch.float64) != tr.a1).any(-1)
            a2_spec = qdq_activation(s["a2_in"].detach().cpu().float(), cfg.scheme,
                                     scale=getattr(cfg, "a2_scale", None), gscale=getattr(cfg, "a2_gscale", None),
                                     which="a2")
            a2_bad |= (a2_spec != s["a2"].detach().cpu().float()).any(-1).reshape(T, -1).any(-1)
        tol = output_tolerance(trace, qc, out_dtype=layer.dtype, c_prec=layer_c_prec(f, hidden.device),
                               shared_config=f.shared_quant_config)
        got = layer.detach().cpu().to(torch.float64)
        err = (got - trace.out).abs()
        inside = (err <= tol) & ~(a1_bad | a2_bad).unsqueeze(-1)
        out = torch.where(inside, got, trace.out)
        st = self.stats
        st["elements"] += inside.numel()
        st["outside"] += int((~inside).sum())
        st["tokens_outside"] += int((~inside).any(-1).sum())
        st["a1_mismatch_tokens"] += int(a1_bad.sum())
        st["a2_inconsistent_tokens"] += int(a2_bad.sum())
        if err.numel():
            st["max_err_over_tol"] = max(st["max_err_over_tol"], float((err / tol).max()))
        return out.to(device=hidden.device, dtype=hidden.dtype)


def new_oracle_stats() -> dict:
    return {"elements": 0, "outside": 0, "tokens_outside": 0, "a1_mismatch_tokens": 0,
            "a2_inconsistent_tokens": 0, "max_err_over_tol": 0.0}


def layer_c_prec(fused: nn.Module, device) -> float:
    """Extra relative GEMM error of the layer's experts backend (0 for float32
    GEMMs; the fused kernel's documented c_prec for its resolved precision)."""
    ex = fused.experts
    if getattr(ex, "backend", "unfused") != "fused":
        return 0.0

    return fused_kernels.c_prec(ex.scheme, fused_kernels.resolve_precision(ex.fused_precision, ex.scheme, device))


ORACLE_PREFIX = "oracle:"


def keep_codes_for(backend: str, oracle: bool) -> bool:
    """Whether emulated layers keep their unpacked expert weight codes: THE one
    place this is decided (the eval, the lm-eval adapter and the loaders take
    its answer). The unfused backend reads them on every forward; a fused
    layer reads only its kernel weights, so it keeps them only when the
    certified oracle (OracleMoE, the kl_oracle gate: harness.gates.kl.oracle_max)
    will run, which reads them through the float64 reference."""
    return backend != "fused" or bool(oracle)


def _parent(model: nn.Module, dotted: str):
    parent_name, _, child = dotted.rpartition(".")
    return (model.get_submodule(parent_name) if parent_name else model), child


@dataclass
class Swapper:
    """Holds the original blocks and one built emulation per scheme; `use(s)`
    switches the whole model between them (cheap: module attribute swaps)."""

    model: nn.Module
    specs: list[MoEBlockSpec]
    originals: dict = field(default_factory=dict)
    built: dict = field(default_factory=dict)     # scheme -> {name: module}
    current: str | None = None

    @classmethod
    def attach(cls, model: nn.Module) -> "Swapper":
        specs = find_moe_blocks(model)
        originals = {s.name: model.get_submodule(s.name) for s in specs}
        return cls(model=model, specs=specs, originals=originals)

    def build(self, scheme: str, build_fn, scales: dict | None = None, backend: str = "unfused",
              keep_codes: bool = True) -> None:
        mods = {}
        for spec in self.specs:
            gs = (scales or {}).get(spec.name, {})
            # gs: {a1_gscale, a2_gscale[, shared_a1_gscale, shared_a2_gscale]} (calibrate.scales_from_amax)
            # keep_codes goes to build_fn only when False: a builder without the option still builds the default
            lean = {} if keep_codes else {"keep_codes": False}
            emu = build_fn(scheme, spec.w13, spec.w2, top_k=spec.top_k, **spec.options, **gs, backend=backend, **lean)
            mods[spec.name] = EmulatedSparseMoeBlock(spec, emu, scheme)
        self.built[scheme] = mods

    def build_oracle(self, scheme: str) -> str:
        """Reference (float64 oracle) blocks for an already built quantized scheme."""
        name = ORACLE_PREFIX + scheme
        if name not in self.built:
            mods = {}
            for spec in self.specs:
                layer = self.built[scheme][spec.name].emulated
                if getattr(layer, "quant_config", None) is None:
                    raise ValueError(f"scheme {scheme!r} has no quant config: no oracle")
                mods[spec.name] = EmulatedSparseMoeBlock(spec, OracleMoE(layer), name)
            self.built[name] = mods
        return name

    def oracle_stats(self, name: str, reset: bool = False) -> dict:
        """Certification counts summed over the oracle blocks of `name`
        (elements checked, elements outside their bound, largest err/tol)."""
        total = new_oracle_stats()
        for mod in self.built.get(name, {}).values():
            st = mod.emulated.stats
            for k in ("elements", "outside", "tokens_outside", "a1_mismatch_tokens", "a2_inconsistent_tokens"):
                total[k] += st[k]
            total["max_err_over_tol"] = max(total["max_err_over_tol"], st["max_err_over_tol"])
            if reset:
                mod.emulated.stats = new_oracle_stats()
        return total

    def use(self, scheme: str | None) -> None:
        """Install `scheme`'s blocks; None puts the original transformers blocks back."""
        table = self.originals if scheme is None else self.built[scheme]
        for name, mod in table.items():
            parent, child = _parent(self.model, name)
            setattr(parent, child, mod)
        self.current = scheme
