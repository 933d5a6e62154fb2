"""Registry of every Triton kernel and every GPU launch configuration the
host code can pick, for the ahead-of-time compile check (`moe-harness targets`).

A module per family of launchers registers its kernels (emulation_launches.py
for launch.py; fused_launches.py for fused_gemm.py and fused_act.py):

    registry.register("qdq_kernel", lambda: kernels(False).qdq_kernel, qdq_variants)

where the variants function, given a backend ("cuda" or "hip"), yields one
`Variant` per launch the host code can make on a GPU of that backend
(argument types, constexprs, compile options), built from the
same tables and helpers the launcher uses. PROVIDERS names the modules that
register; suites/targets checks that every kernel harness.aot.inventory
finds in the source is registered, so a new kernel cannot be left out.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

# Modules whose import registers kernels (names: importing the registry
# loads no kernel source).
PROVIDERS = ("harness.aot.emulation_launches", "harness.aot.fused_launches")


@dataclass(frozen=True)
class Variant:
    """One launch: `signature` maps each runtime argument to its Triton type
    ("*bf16", "i32", ...), `constexprs` the compile-time ones, `options` the
    compile options the launcher passes (num_warps, num_stages, maxnreg, enable_fp_fusion)."""

    config: str
    signature: dict = field(hash=False)
    constexprs: dict = field(hash=False)
    options: dict = field(hash=False)


@dataclass(frozen=True)
class Kernel:
    name: str
    jit: Callable  # () -> the compiled (not interpreted) triton JITFunction
    variants: Callable[[str], Iterable[Variant]]  # (backend "cuda" | "hip") -> launches there

    def source_file(self) -> Path:
        fn = self.jit()
        return Path(inspect.getsourcefile(getattr(fn, "fn", fn))).resolve()


_REGISTRY: dict[str, Kernel] = {}


def register(name: str, jit: Callable, variants: Callable[[str], Iterable[Variant]]) -> Kernel:
    if name in _REGISTRY:
        raise ValueError(f"Triton kernel {name!r} is registered twice")
    k = Kernel(name, jit, variants)
    _REGISTRY[name] = k
    return k


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def kernels() -> dict[str, Kernel]:
    """Every registered kernel (imports the PROVIDERS first)."""
    for mod in PROVIDERS:
        importlib.import_module(mod)
    return dict(_REGISTRY)


def bind(kernel, types: dict, constexprs: dict) -> tuple[dict, dict]:
    """(ASTSource signature, constexprs) of one launch of a JITFunction: runtime
    types for the arguments in `types`, "constexpr" for those in `constexprs`
    and for constexpr parameters left at their defaults (as the launcher binds
    them); any other argument is an error."""
    params = inspect.signature(getattr(kernel, "fn", kernel)).parameters
    consts = {k: v for k, v in constexprs.items() if k in params}
    sig = {}
    for n, p in params.items():
        if n not in consts and n not in types and p.default is not inspect.Parameter.empty:
            consts[n] = p.default
        if n in consts:
            sig[n] = "constexpr"
        elif n in types:
            sig[n] = types[n]
        else:
            raise ValueError(f"kernel {kernel.__name__}: argument {n!r} has neither a type nor a constexpr value")
    return sig, consts
