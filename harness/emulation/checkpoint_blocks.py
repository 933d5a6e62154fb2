"""MoE blocks of a swapped model built from a producer checkpoint: one
harness FusedMoE per sparse-MoE block, its experts from the checkpoint's
quant config (harness.checkpoints.load), routing (router weight and bias,
activation) from the float model.

Per-expert biases come from the checkpoint: a block whose family row has
them (gpt_oss' gate_up_proj_bias / down_proj_bias) needs them in the
checkpoint, a block without them must find none there; either mismatch is
one CheckpointFormatError naming the tensor (the format's own name where it
stores biases). The checkpoint's biases, not the float model's, go into the
layer. Likewise a block whose family has a shared expert (DeepSeek-V3
`shared_experts`, Llama4 `shared_expert`) takes it from the checkpoint,
quantized in the checkpoint's scheme like a routed expert (as vLLM's
compressed-tensors and ModelOpt configs quantize it), and DeepSeek-V3's
router `e_score_correction_bias` is the checkpoint's; a missing one is
refused naming the tensor."""
from __future__ import annotations

import torch

from harness.emulation.moe_swap import ROUTING_KEYS, EmulatedSparseMoeBlock
from harness.checkpoints import detect, load
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import read_tensors
from harness.kernels.fused_weights import FusedWeights
from harness.moe.experts import make_experts
from harness.moe.layer import FusedMoE
from harness.emulation import families, parallel


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


def build(swapper, folder: str, expect: str, backend: str = "unfused", keep_codes: bool = True) -> tuple[str, dict]:
    """-> (the checkpoint's scheme, {block name: emulated block}); keep_codes
    as harness.moe.experts (the caller takes it from moe_swap.keep_codes_for)."""
    files, fmt, scheme, tensors = read_tensors(folder, expect=expect)
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
        mods[spec.name] = build_block(files, fmt, scheme, spec, tensors[spec.name], dev, backend, folder, keep_codes)
        # the read tensors of this block are dropped too: with keep_codes=False its codes are then freed
        del tensors[spec.name]
    return scheme, mods


def build_block(files, fmt: str, scheme: str, spec, tensors: dict, dev, backend: str = "unfused", folder=None,
                keep_codes: bool = True):
    """One emulated block from the reader's stacked tensors of `spec`'s experts, every
    tensor on `dev`: the routed experts, their biases, the shared expert and the router's
    correction bias from the checkpoint; routing and activation from the spec (the model's);
    keep_codes as harness.moe.experts."""
    folder = files.folder if folder is None else folder
    reader = detect.reader(fmt)
    qc = load.quant_config(fmt, _where(tensors, dev, backend, keep_codes), scheme, folder, f"{spec.name} experts")
    _check_shapes(folder, f"{spec.name}.experts", qc, spec.num_experts, spec.hidden, spec.intermediate)
    _check_biases(folder, fmt, reader, spec, qc)
    row = families.FAMILIES[spec.family]
    routing = spec.routing_options()
    if "e_score_correction_bias" in routing:
        routing["e_score_correction_bias"] = _correction_bias(files, row, spec).to(dev)
    shared = (_shared_experts(files, fmt, scheme, row, spec, dev, backend, keep_codes)
              if "shared_w13" in spec.options else None)
    weights = sorted(set(spec.options) - set(ROUTING_KEYS) - set(BIAS_KEYS) - set(SHARED_KEYS))
    if weights:
        raise CheckpointFormatError(folder, f"{spec.name}", f"a {spec.family} block without {weights[0]} "
                                    "(checkpoint-built layers read the routed experts, their biases and the "
                                    "shared expert only)")
    experts = _experts(qc, dev, backend, keep_codes)
    del qc
    fused = FusedMoE(experts, top_k=spec.top_k, shared_experts=shared, **routing)
    return EmulatedSparseMoeBlock(spec, fused, scheme)


SHARED_KEYS = ("shared_w13", "shared_w2")


def _to(tensors: dict, dev) -> dict:
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in tensors.items()}


def _where(tensors: dict, dev, backend: str, keep_codes: bool) -> dict:
    """Where the reader's quant config is built: on `dev`, or on the host when
    the layer keeps no codes (fused, keep_codes=False; `_experts`)."""
    return tensors if backend == "fused" and not keep_codes else _to(tensors, dev)


def _experts(qc, dev, backend: str, keep_codes: bool):
    """make_experts on `dev`. Without the codes (fused, keep_codes=False) the codes
    stay on the host, where the reader unpacked them, and the kernel weights are
    built on `dev` a few experts at a time: a layer's unpacked codes (1 byte a
    weight) never reach the device, whose peak while loading is then the layers'
    kernel format plus one chunk (the memory model's figure), not plus a layer's codes."""
    if backend != "fused" or keep_codes:
        return make_experts(qc, backend=backend, keep_codes=keep_codes)
    kernel = tuple(FusedWeights.from_quantized_by_experts(q, gs, dev)
                   for q, gs in ((qc.w13_q, qc.w13_gscale), (qc.w2_q, qc.w2_gscale)))
    return make_experts(qc.without_codes(dev), backend=backend, keep_codes=False, kernel_weights=kernel)


def _correction_bias(files, row, spec):
    """The router's e_score_correction_bias [E] as the checkpoint carries it (float, finite)."""
    name = f"{spec.name}.{row.router}.{row.correction_bias}"
    b = load.router_vector(files, name, spec.num_experts)
    if b is None:
        raise CheckpointFormatError(files.folder, name, f"the {spec.family} router's correction bias "
                                    f"[{spec.num_experts}] (its model selects experts with it), it is missing")
    return b


def _shared_experts(files, fmt, scheme, row, spec, dev, backend, keep_codes=True):
    """The block's dense shared MLP from the checkpoint, quantized like the routed
    experts in the checkpoint's scheme, as a one-expert experts object."""
    prefix = f"{spec.name}.{row.shared}"
    w13, w2 = spec.options["shared_w13"], spec.options["shared_w2"]
    t = load.read_shared(files, fmt, prefix, scheme)
    if t is None:
        raise CheckpointFormatError(files.folder, f"{prefix}.{row.shared_names[0]}",
                                    f"the {spec.family} block's shared expert ([2S, H] = {list(w13.shape)}, "
                                    f"[H, S] = {list(w2.shape)}), quantized in {scheme}: no tensor under {prefix}")
    qc = load.quant_config(fmt, _where(t, dev, backend, keep_codes), scheme, files.folder, f"{prefix} (shared expert)")
    _check_shapes(files.folder, f"{prefix} (shared expert)", qc, 1, w13.shape[1], w2.shape[1])
    return _experts(qc, dev, backend, keep_codes)


def _check_shapes(folder, what: str, qc, E: int, H: int, I: int) -> None:
    """w13 [E, 2I, H] and w2 [E, H, I] as the model's block has them (element codes)."""
    got = (tuple(qc.w13_q.codes.shape), tuple(qc.w2_q.codes.shape))
    want = ((E, 2 * I, H), (E, H, I))
    if got != want:
        raise CheckpointFormatError(folder, what, f"w13 [E, 2I, H] = {list(want[0])} and w2 [E, H, I] = "
                                    f"{list(want[1])}, got {list(got[0])} and {list(got[1])}")
