"""MoE blocks of a swapped model built from a producer checkpoint: one
harness FusedMoE per sparse-MoE block, its experts from the checkpoint's
quant config (harness.checkpoints.load), routing from the float model."""
from __future__ import annotations

from harness.emulation.moe_swap import ROUTING_KEYS, EmulatedSparseMoeBlock
from harness.checkpoints import detect
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import read_tensors
from harness.moe.experts import make_experts
from harness.moe.layer import FusedMoE
from harness.emulation import parallel


def build(swapper, folder: str, expect: str, backend: str = "unfused", keep_codes: bool = True) -> tuple[str, dict]:
    """-> (the checkpoint's scheme, {block name: emulated block}); keep_codes
    as harness.moe.experts (the caller takes it from moe_swap.keep_codes_for)."""
    import torch



    _, fmt, scheme, tensors = read_tensors(folder, expect=expect)
    reader = detect.reader(fmt)
    names = {s.name for s in swapper.specs}
    extra = sorted(set(tensors) - names)
    if extra:
        raise CheckpointFormatError(folder, f"experts of {extra[0]}", f"MoE blocks of the model ({len(names)} found)")
    mods = {}
    for spec in swapper.specs:
        if spec.name not in tensors:
            raise CheckpointFormatError(folder, f"{spec.name}.experts", "quantized experts for every MoE block of the model")
        # the quant config is built where the block's layer runs (model parallel: its GPU)
        dev = parallel.layer_device(swapper.model, spec.name)
        t = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in tensors[spec.name].items()}
        try:
            qc = reader.quant_config(t, scheme)
        except ValueError as e:
            raise CheckpointFormatError(folder, f"{spec.name} experts", f"tensors the {fmt} loader accepts ({e})") from e
        got = (qc.num_experts, qc.hidden_size, qc.intermediate_size)
        if got != (spec.num_experts, spec.hidden, spec.intermediate):
            raise CheckpointFormatError(folder, f"{spec.name}.experts", f"[E, H, I] = {(spec.num_experts, spec.hidden, spec.intermediate)}, got {got}")
        weights = sorted(set(spec.options) - set(ROUTING_KEYS))
        if weights:
            raise CheckpointFormatError(folder, f"{spec.name}", f"a {spec.family} block without {weights[0]} "
                                        "(checkpoint-built layers read the routed experts only)")
        experts = make_experts(qc, backend=backend, keep_codes=keep_codes)
        # the read tensors of this block are dropped too: with keep_codes=False the codes are then freed
        del qc, t, tensors[spec.name]
        fused = FusedMoE(experts, top_k=spec.top_k, **spec.routing_options())
        mods[spec.name] = EmulatedSparseMoeBlock(spec, fused, scheme)
    return scheme, mods
