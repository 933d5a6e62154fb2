"""`moe-harness conform`: hold any implementation of NVFP4 / OCP MX to the spec.

    from harness.conformance import Implementation, register_implementation, run_conformance

Modules: protocol (what an implementation declares and provides), registry
(entry points, module:object, did-you-mean), families (inputs from the format
table), exact (the spec in rational arithmetic), verdict (who is right),
shrink (minimal failing block), divergences (+ divergences.yaml: the reviewed
registry of known divergences), compare (one cell), isolation (each implementation in a child process
with time limits), runner (a whole run),
report (JSON, markdown, heat map), command (the CLI), bench (`moe-harness
bench conform`), check (the pytest plugin's `conformance.check`), adapters/
(shipped implementations: reference, harness-triton, torchao, compressed-tensors,
amd-quark, nvidia-modelopt, vLLM).
"""
from harness.conformance.protocol import STAGES, Implementation, Unavailable
from harness.conformance.registry import GROUP, available_names, get_implementation, register_implementation
from harness.conformance.runner import run_conformance

__all__ = ["GROUP", "STAGES", "Implementation", "Unavailable", "available_names", "get_implementation",
           "register_implementation", "run_conformance"]
