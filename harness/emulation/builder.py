"""Where the MoE emulation layer comes from: harness.moe.build_emulated_moe,
for every scheme including the bf16 baseline (one code path: a missing
harness.moe is an import error, never a substitute layer)."""

from __future__ import annotations

from harness.moe import build_emulated_moe
from harness.moe.schemes import get_scheme


def needs_activation_scales(scheme: str) -> bool:
    """Whether the scheme's row requires calibrated activation global scales."""
    return get_scheme(scheme).needs_act_gscale


def emulation_builder():
    return build_emulated_moe


def builder_source(fn) -> str:
    return f"{fn.__module__}.{fn.__name__}"
