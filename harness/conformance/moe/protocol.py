"""The MoE implementation protocol: what an MoE layer under test declares and
provides (docs/conformance.md, "Holding an MoE implementation to the checks").

An implementation declares the schemes (rows of harness.moe.schemes), routing
kinds, activations, devices and hidden dtypes it supports, the conventions of
the weights it wants, and the precision of its GEMM operands; it provides

    build(weights, config) -> forward(hidden [T, H], router_logits [T, E]) -> [T, H]

`weights` is a `MoEWeights` (weights.py): a torch.nn.Module holding only
vLLM's MoE parameter names (w13_weight, w13_weight_scale, ...), laid out as
its `conventions` ask; `config` is a `MoEConfig`. The output has hidden's
dtype and device.

Optional hooks, for the checks a black box cannot answer (a check whose hook
is missing is reported "not provided", never guessed):

    observe_qdq() -> context manager yielding a list; while it is active, the
        implementation appends one entry per activation quantize-dequantize
        it performs, a dict with at least "shape" (the QDQ input's shape)
    probe_large_offsets(device: str) -> dict: run the implementation's grouped
        GEMM with expert weights placed past 2^31 bytes and raise
        AssertionError when a result is wrong
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from harness.conformance.protocol import Unavailable
from harness.moe.activations import ACTIVATIONS
from harness.moe.schemes import SCHEME_NAMES, get_scheme


@dataclass(frozen=True)
class Routing:
    """One routing kind: the scoring function over all E logits and whether
    the k selected weights are divided by their sum."""

    name: str
    scoring: str
    renormalize: bool


# Routing kinds by name; an implementation lists the ones it supports.
ROUTINGS = {r.name: r for r in (
    Routing("softmax_renorm", "softmax", True),   # = top-k of the logits, softmax over the k (Mixtral, gpt-oss)
    Routing("softmax", "softmax", False),         # softmax over all E, the k largest kept (Qwen-MoE)
    Routing("sigmoid_renorm", "sigmoid", True),
    Routing("sigmoid", "sigmoid", False),
)}

# Weight conventions: key -> allowed values (the first is the default).
CONVENTIONS = {
    # two-level (NVFP4-style) global scales: "decode" = ModelOpt names and
    # direction (w13_weight_scale_2 = amax / 2688, w13_input_scale = amax_in / 2688),
    # "encode" = compressed-tensors (w13_weight_global_scale = 2688 / amax,
    # w13_input_global_scale = 2688 / amax_in)
    "global_scale": ("decode", "encode"),
    # fp4 codes two per byte, low nibble = element 2i ("packed"), or one per byte
    "packing": ("packed", "unpacked"),
    # w13 rows: all gate rows then all up rows, or gate/up alternating (gpt-oss)
    "gate_up": ("concatenated", "interleaved"),
}

# Declared precision of the GEMM operands and results (inputs rounded to it
# before a GEMM, results rounded to it after) -> the relative error c_prec
# added to each GEMM's bound in harness.moe.tolerance: one rounding of the
# operand and one of the result, 2 u of the dtype. float32 adds nothing (the
# float32 bound is already there).
GEMM_PRECISIONS = {"float32": 0.0, "bfloat16": 2 * 2.0**-8, "float16": 2 * 2.0**-11}

DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class MoEConfig:
    """What `build` is told about the layer (besides the weights)."""

    scheme: str                 # a row of harness.moe.schemes
    weight_format: str          # the row's weight format (harness.formats name)
    activation_format: Optional[str]  # the row's activation format, None = weight-only
    scale_mode: str             # the row's MX scale mode (weights were quantized, activations are QDQ'd, in it)
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    routing: str                # a ROUTINGS name
    scoring: str
    renormalize: bool
    activation: str             # "silu" | "swiglu_clamp" (harness.moe.activations)
    dtype: torch.dtype          # hidden's (and the output's) dtype
    device: str
    conventions: dict = field(default_factory=dict)


@dataclass
class MoEImplementation:
    """One MoE layer under test."""

    name: str
    build: Callable
    version: str = "unversioned"
    schemes: tuple = SCHEME_NAMES
    routings: tuple = tuple(ROUTINGS)
    activations: tuple = tuple(ACTIVATIONS)
    devices: tuple = ("cpu", "cuda")
    dtypes: tuple = ("float32", "bfloat16")
    conventions: dict = field(default_factory=dict)
    gemm_precision: str = "float32"
    observe_qdq: Optional[Callable] = None
    probe_large_offsets: Optional[Callable] = None
    # Problem sizes before shrinking: at most max_tokens tokens and max_experts
    # experts (an interpreter is slow); H = I = base_size, a multiple of
    # size_multiple (a kernel's tile; every size stays a multiple of it).
    max_tokens: int = 16
    max_experts: int = 8
    size_multiple: int = 32
    base_size: int = 64

    def __post_init__(self):
        def bad(what, got, allowed):
            wrong = [g for g in got if g not in allowed]
            if wrong:
                raise ValueError(f"MoE implementation {self.name!r}: unknown {what} {wrong}; expected {list(allowed)}")

        if not callable(self.build):
            raise ValueError(f"MoE implementation {self.name!r}: build must be callable")
        for s in self.schemes:
            get_scheme(s)  # ValueError naming the known schemes
        bad("routings", self.routings, ROUTINGS)
        bad("activations", self.activations, ACTIVATIONS)
        bad("dtypes", self.dtypes, DTYPE_NAMES)
        bad("conventions", self.conventions, CONVENTIONS)
        for k, allowed in CONVENTIONS.items():
            v = self.conventions.get(k, allowed[0])
            if v not in allowed:
                raise ValueError(f"MoE implementation {self.name!r}: conventions.{k} {v!r} is not one of {allowed}")
        self.conventions = {k: self.conventions.get(k, allowed[0]) for k, allowed in CONVENTIONS.items()}
        if self.gemm_precision not in GEMM_PRECISIONS:
            raise ValueError(f"MoE implementation {self.name!r}: gemm_precision {self.gemm_precision!r} is not one "
                             f"of {list(GEMM_PRECISIONS)}")
        if (self.size_multiple < 1 or self.size_multiple % 32 or self.base_size % self.size_multiple
                or min(self.max_tokens, self.max_experts, self.base_size) < 1):
            raise ValueError(f"MoE implementation {self.name!r}: size_multiple must be a multiple of 32 (every block "
                             "size divides it), base_size a multiple of size_multiple, max_tokens and max_experts "
                             f">= 1; got {self.size_multiple}, {self.base_size}, {self.max_tokens}, {self.max_experts}")
        for what in ("schemes", "routings", "activations", "devices", "dtypes"):
            if not getattr(self, what):
                raise ValueError(f"MoE implementation {self.name!r} declares no {what}")

    @property
    def c_prec(self) -> float:
        return GEMM_PRECISIONS[self.gemm_precision]

    def hooks(self) -> dict:
        return {h: getattr(self, h) is not None for h in ("observe_qdq", "probe_large_offsets")}

    def describe(self) -> dict:
        return {"name": self.name, "version": self.version, "schemes": list(self.schemes),
                "routings": list(self.routings), "activations": list(self.activations),
                "devices": list(self.devices), "dtypes": list(self.dtypes), "conventions": dict(self.conventions),
                "gemm_precision": self.gemm_precision, "hooks": self.hooks()}


__all__ = ["CONVENTIONS", "DTYPE_NAMES", "GEMM_PRECISIONS", "MoEConfig", "MoEImplementation", "ROUTINGS",
           "Routing", "Unavailable"]
