"""MoE blocks of a swapped model built from a producer checkpoint: one
harness FusedMoE per sparse-MoE block, its experts from the checkpoint's
quant config (harness.checkpoints.load), routing (router weight and bias,
activation) from the float model.

Per-expert biases come from the checkpoint: a block whose family row has
them (gpt_oss' gate_up_proj_bias / down_proj_bias) needs them in the
checkpoint, a block without them must find none there; either mismatch is
one CheckpointFormatError naming the tensor (the format's own name where it
stores biases). The checkpoint's biases, not the float model's, go into the
layer."""
from __future__ import annotations

from harness.emulation.moe_swap import ROUTING_KEYS, EmulatedSparseMoeBlock
from harness.checkpoints import detect
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import read_tensors
from harness.moe.experts import make_experts
from harness.moe.layer import FusedMoE
from harness.emulation import parallel


BIAS_KEYS = ("w13_bias", "w2_bias")


def _check_biases(folder, fmt: str, reader, spec, qc) -> None:
    want = "w13_bias" in spec.options
    have = qc.w13_bias is not None
    if want == have:
        return
    suffixes = reader.BIAS_SUFFIXES
    tensor = (reader.bias_tensor(spec.name, "w13_bias") if suffixes else f"{spec.name}.experts (expert biases)")
    if want:
        E, I2 = spec.options["w13_bias"].shape
        where = "" if suffixes else f"; the {fmt} format stores none"
        raise CheckpointFormatError(folder, tensor, f"the {spec.family} block's expert biases ([{E}, {I2}] and "
                                    f"[{E}, {spec.hidden}]: its model has them{where}), they are missing")
    raise CheckpointFormatError(folder, tensor, f"no expert biases (a {spec.family} block has none), "
                                "the checkpoint has them")


def build(swapper, folder: str, expect: str, backend: str = "unfused") -> tuple[str, dict]:
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
        _check_biases(folder, fmt, reader, spec, qc)
        weights = sorted(set(spec.options) - set(ROUTING_KEYS) - set(BIAS_KEYS))
        if weights:
            raise CheckpointFormatError(folder, f"{spec.name}", f"a {spec.family} block without {weights[0]} "
                                        "(checkpoint-built layers read the routed experts and their biases only)")
        fused = FusedMoE(make_experts(qc, backend=backend), top_k=spec.top_k, **spec.routing_options())
        mods[spec.name] = EmulatedSparseMoeBlock(spec, fused, scheme)
    return scheme, mods
