"""MoE blocks of a swapped model built from a producer checkpoint: one
harness FusedMoE per sparse-MoE block, its experts from the checkpoint's
quant config (harness.checkpoints.load), routing from the float model."""
from __future__ import annotations

from .moe_swap import EmulatedSparseMoeBlock


def build(swapper, folder: str, expect: str, backend: str = "unfused") -> tuple[str, dict]:
    from harness.checkpoints.errors import CheckpointFormatError
    from harness.checkpoints.load import load_checkpoint
    from harness.moe.experts import make_experts
    from harness.moe.layer import FusedMoE

    loaded = load_checkpoint(folder, expect=expect)
    names = {s.name for s in swapper.specs}
    extra = sorted(set(loaded.quant_configs) - names)
    if extra:
        raise CheckpointFormatError(folder, f"experts of {extra[0]}", f"MoE blocks of the model ({len(names)} found)")
    mods = {}
    for spec in swapper.specs:
        qc = loaded.quant_configs.get(spec.name)
        if qc is None:
            raise CheckpointFormatError(folder, f"{spec.name}.experts", "quantized experts for every MoE block of the model")
        got = (qc.num_experts, qc.hidden_size, qc.intermediate_size)
        if got != (spec.num_experts, spec.hidden, spec.intermediate):
            raise CheckpointFormatError(folder, f"{spec.name}.experts", f"[E, H, I] = {(spec.num_experts, spec.hidden, spec.intermediate)}, got {got}")
        fused = FusedMoE(make_experts(qc, backend=backend), top_k=spec.top_k, renormalize=spec.renormalize,
                         scoring="softmax", activation="silu")
        mods[spec.name] = EmulatedSparseMoeBlock(spec, fused, loaded.scheme)
    return loaded.scheme, mods
