"""`moe-harness conform --moe`: hold any MoE implementation to the bug-class checks.

    from harness.conformance.moe import MoEImplementation, run_moe_conformance, check_moe

Modules: protocol (what an implementation declares and provides), weights
(vLLM's parameter names and layouts handed to build), problems (families,
ground truth, the float64 reference and its tolerance), checks (one row per
bug class), shrink (the minimal failing problem), runner (a whole run),
report (results.json, summary.md, junit.xml), check (the pytest fixture's
`moe_conformance.check`), registry (entry points, module:object), layers
(the harness' own layers), planted (one planted bug per seed class),
triton_kernels (triton_kernels' W4A16 MXFP4 MoE, GPU).
"""
from harness.conformance.moe.check import check_moe
from harness.conformance.moe.protocol import CONVENTIONS, ROUTINGS, MoEConfig, MoEImplementation, Unavailable
from harness.conformance.moe.registry import (
    GROUP,
    available_names,
    get_moe_implementation,
    register_moe_implementation,
)
from harness.conformance.moe.runner import run_moe_conformance
from harness.conformance.moe.weights import MoEWeights

__all__ = ["CONVENTIONS", "GROUP", "ROUTINGS", "MoEConfig", "MoEImplementation", "MoEWeights", "Unavailable",
           "available_names", "check_moe", "get_moe_implementation", "register_moe_implementation",
           "run_moe_conformance"]
