"""Find the sparse-MoE blocks of a transformers causal LM and swap them for
harness.moe emulation layers.

Supported layouts (read from the installed transformers source):
- transformers 5.x Mixtral / Qwen2-MoE / Qwen3-MoE: `block.experts` holds fused
  3-D parameters `gate_up_proj` [E, 2I, H] (gate rows then up rows) and
  `down_proj` [E, H, I]; `block.gate` is a router with `weight` [E, H]. Mixtral
  always renormalizes the top-k probabilities; the Qwen routers do when
  `norm_topk_prob` is set. Qwen2-MoE adds a dense `shared_expert` gated by
  sigmoid(`shared_expert_gate`), which stays unquantized (as vLLM keeps it
  outside the fused-MoE kernel).
- transformers 4.x: `block.experts` is a ModuleList of per-expert MLPs
  (Mixtral w1/w3/w2, Qwen gate_proj/up_proj/down_proj) and `block.gate` an
  nn.Linear; the per-expert weights are stacked into the fused layout.

Routing is always softmax -> top-k (-> renormalize), which is what the
emulation layer implements; the replacement computes router logits with the
block's own router weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from harness.kernels import fused_gemm as fused_kernels
from harness.moe.reference import reference_moe_trace
from harness.moe.tolerance import output_tolerance
from harness.moe.reference import qdq_activation


@dataclass
class MoEBlockSpec:
    name: str                    # dotted module path, e.g. "model.layers.0.mlp"
    family: str                  # "mixtral" | "qwen2_moe" | "qwen3_moe" | "generic"
    w13: torch.Tensor            # [E, 2I, H]
    w2: torch.Tensor             # [E, H, I]
    router_weight: torch.Tensor  # [E, H]
    top_k: int
    renormalize: bool
    shared_expert: nn.Module | None = None
    shared_expert_gate: nn.Module | None = None
    activation: str = "silu"

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    @property
    def hidden(self) -> int:
        return self.w13.shape[2]

    @property
    def intermediate(self) -> int:
        return self.w2.shape[2]


def _family(block: nn.Module) -> str:
    cls = type(block).__name__.lower()
    for fam in ("mixtral", "qwen2moe", "qwen3moe"):
        if fam in cls:
            return {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}.get(fam, fam)
    return "generic"


def _stack_experts(experts: nn.ModuleList) -> tuple[torch.Tensor, torch.Tensor]:
    first = experts[0]
    if all(hasattr(first, a) for a in ("w1", "w2", "w3")):      # Mixtral 4.x
        gate = [e.w1.weight for e in experts]
        up = [e.w3.weight for e in experts]
        down = [e.w2.weight for e in experts]
    elif all(hasattr(first, a) for a in ("gate_proj", "up_proj", "down_proj")):
        gate = [e.gate_proj.weight for e in experts]
        up = [e.up_proj.weight for e in experts]
        down = [e.down_proj.weight for e in experts]
    else:
        raise TypeError(f"unknown per-expert layout: {type(first).__name__}")
    w13 = torch.stack([torch.cat([g, u], dim=0) for g, u in zip(gate, up)])
    return w13.detach(), torch.stack(down).detach()


def _block_spec(name: str, block: nn.Module, config) -> MoEBlockSpec | None:
    experts = getattr(block, "experts", None)
    gate = getattr(block, "gate", None)
    if experts is None or gate is None:
        return None
    if isinstance(experts, nn.ModuleList):
        w13, w2 = _stack_experts(experts)
    elif hasattr(experts, "gate_up_proj") and hasattr(experts, "down_proj"):
        if getattr(experts, "is_transposed", False):
            raise TypeError(f"{name}: transposed expert layout is not supported")
        w13, w2 = experts.gate_up_proj.detach(), experts.down_proj.detach()
    else:
        return None
    if w13.dim() != 3 or w2.dim() != 3:
        return None
    router_weight = gate.weight.detach()
    family = _family(block)
    top_k = int(getattr(gate, "top_k", None) or getattr(block, "top_k", None) or config.num_experts_per_tok)
    if family == "mixtral":
        renorm = True
    else:
        renorm = bool(getattr(gate, "norm_topk_prob", getattr(block, "norm_topk_prob",
                                                               getattr(config, "norm_topk_prob", False))))
    act = getattr(config, "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise TypeError(f"{name}: activation {act!r} is not supported by the emulation layer")
    return MoEBlockSpec(
        name=name, family=family, w13=w13, w2=w2, router_weight=router_weight, top_k=top_k,
        renormalize=renorm, shared_expert=getattr(block, "shared_expert", None),
        shared_expert_gate=getattr(block, "shared_expert_gate", None),
    )


def find_moe_blocks(model: nn.Module) -> list[MoEBlockSpec]:
    config = getattr(model, "config", None)
    specs = []
    for name, module in model.named_modules():
        spec = _block_spec(name, module, config)
        if spec is not None:
            specs.append(spec)
    if not specs:
        raise TypeError(f"{type(model).__name__}: no sparse-MoE blocks found")
    return specs


class EmulatedSparseMoeBlock(nn.Module):
    """Drop-in for a transformers sparse-MoE block: router logits from the
    block's router weight, experts through a harness.moe emulation layer."""

    def __init__(self, spec: MoEBlockSpec, emulated: nn.Module, scheme: str):
        super().__init__()
        self.spec_name = spec.name
        self.scheme = scheme
        self.router_weight = nn.Parameter(spec.router_weight, requires_grad=False)
        self.emulated = emulated
        self.shared_expert = spec.shared_expert
        self.shared_expert_gate = spec.shared_expert_gate

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.is_cuda:
            # Triton launches on the CURRENT device, not the tensors': with the
            # layers spread over GPUs (accelerate hooks move tensors, not the
            # current device) the block's kernels must run under its own device.
            with torch.cuda.device(hidden_states.device):
                return self._forward(hidden_states)
        return self._forward(hidden_states)

    def _forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        h = hidden_states.reshape(-1, shape[-1])
        router_logits = nn.functional.linear(h, self.router_weight)
        out = self.emulated(h, router_logits).to(hidden_states.dtype)
        if self.shared_expert is not None:
            shared = self.shared_expert(h)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(h)) * shared
            out = out + shared
        return out.reshape(shape)


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
    inside the tolerance's coarse fp8 interval). A correct layer therefore
    gives an oracle run identical to the emulated run (KL exactly 0 on every
    machine); every element outside moves the oracle to the spec and shows up
    in the KL and in `stats`."""

    def __init__(self, fused: nn.Module):
        super().__init__()
        self.fused = fused
        self.stats = new_oracle_stats()

    def forward(self, hidden: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:

        f = self.fused
        qc = f.quant_config
        trace = reference_moe_trace(hidden, router_logits, qc, top_k=f.top_k,
                                    renormalize=f.renormalize, scoring=f.scoring, activation=f.activation)
        f.experts.trace = seen = {}
        try:
            layer = f(hidden, router_logits)
        finally:
            f.experts.trace = None
        T, k = trace.ids.shape
        a1_bad = (seen["a1"].detach().cpu().to(torch.float64) != trace.a1).any(-1)
        a2_spec = qdq_activation(seen["a2_in"].detach().cpu().float(), qc.scheme, scale=getattr(qc, "a2_scale", None),
                                 gscale=getattr(qc, "a2_gscale", None), which="a2")
        a2_bad = (a2_spec != seen["a2"].detach().cpu().float()).any(-1).reshape(T, k).any(-1)
        tol = output_tolerance(trace, qc, activation=f.activation, out_dtype=layer.dtype,
                               c_prec=layer_c_prec(f, hidden.device))
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

    def build(self, scheme: str, build_fn, scales: dict | None = None, backend: str = "unfused") -> None:
        mods = {}
        for spec in self.specs:
            gs = (scales or {}).get(spec.name, {})
            emu = build_fn(scheme, spec.w13, spec.w2, top_k=spec.top_k, renormalize=spec.renormalize,
                           scoring="softmax", activation="silu", a1_gscale=gs.get("a1_gscale"),
                           a2_gscale=gs.get("a2_gscale"), backend=backend)
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
