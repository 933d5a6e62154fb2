"""Load a quantized MoE checkpoint (the layouts `checkpoint synth` writes:
compressed-tensors as llm-compressor writes it, ModelOpt NVFP4, the gpt-oss
MXFP4 layout) straight into a transformers model whose sparse-MoE blocks are
harness.moe emulation layers, each layer on its device: no float model is
needed and the dense experts never exist.

The model skeleton is transformers' own, built from config.json on the meta
device; its sparse-MoE blocks are found by the family rows
(harness/emulation/families.py, moe_swap.find_moe_blocks), which give each
block's routing, activation, biases and shared expert. Each block is then
built by the checkpoint-blocks path (checkpoint_blocks.build_block), the one
that builds a producer checkpoint's blocks beside a float model: the
format's reader checks and stacks the block's experts (one layer at a time),
the expert biases, the shared expert and DeepSeek's correction bias come
from the checkpoint with its refusals; here the router weight (and bias)
come from the checkpoint too. The other tensors (bf16: attention, norms,
embeddings, dense first layers) are set on their layer's device; accelerate
hooks (`dispatch_model`) then move the activations between layers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from harness.checkpoints import files as cfiles
from harness.checkpoints import detect
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import identify
from harness.emulation import checkpoint_blocks, families, parallel
from harness.emulation.moe_swap import find_moe_blocks
from harness.models.shapes import from_hf_config

# the formats a quantized folder loads from as the model (the others pair with a float model)
FORMATS = ("compressed-tensors", "modelopt", "gpt-oss")


@dataclass
class Loaded:
    model: torch.nn.Module
    blocks: dict
    specs: list
    scheme: str
    device_map: dict


class CheckpointError(ValueError):
    """The checkpoint is not in the layout this loader reads (one line names the file and field)."""


def read_config(model_dir) -> dict:
    path = Path(model_dir) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: cannot read: {e}") from None


def quant_method(model_dir):
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    cfg = read_config(model_dir)
    qc = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    return qc.get("quant_method") if isinstance(qc, dict) else None


def loads_as_model(model_dir) -> bool:
    """A quantized folder in one of FORMATS (its config's quant_method): loaded by `load`."""
    qm = quant_method(model_dir)
    return qm is not None and any(detect.reader(f).recognises({"quantization_config": {"quant_method": qm}})
                                  for f in FORMATS)


def checkpoint_scheme(model_dir) -> str:
    """The harness scheme of a quantized folder, as its reader checks it."""
    files = cfiles.CheckpointFiles(model_dir)
    return detect.reader(detect.detect(files.config, files.folder / "config.json")).scheme(files)


# -- device placement --------------------------------------------------------------------
def balanced_layers(layer_bytes: list[int], n_devices: int) -> list[int]:
    """Contiguous split of the layers over n devices, each device's share of the
    bytes as close to 1/n as the layer boundaries allow: device index per layer."""
    total = sum(layer_bytes)
    out, acc = [], 0
    for b in layer_bytes:
        dev = min(int((acc + b / 2) * n_devices / total), n_devices - 1) if total else 0
        out.append(dev)
        acc += b
    return out


def _layer_sizes(cfg: dict) -> list[int]:
    """Relative sizes of the decoder layers: all equal, but for dense first layers
    (DeepSeek's first_k_dense_replace), which weigh their bf16 parameters against
    an MoE layer's emulated bytes (harness.models.shapes)."""
    n, k = cfg["num_hidden_layers"], cfg.get("first_k_dense_replace") or 0
    if not k:
        return [1] * n
    s = from_hf_config(cfg)
    return [2 * s.dense_layer_params] * k + [s.emulated_layer_bytes(16)] * (n - k)


def device_map_for(cfg: dict, devices: list[str]) -> dict:
    """accelerate device_map: embedding on the first device, the final norm and
    lm_head on the last, the decoder layers split so each device holds as
    close to an even share of their bytes as layer boundaries allow."""
    where = balanced_layers(_layer_sizes(cfg), len(devices))
    dm = {"model.embed_tokens": devices[0], "model.rotary_emb": devices[0]}
    dm.update({f"model.layers.{i}": devices[d] for i, d in enumerate(where)})
    dm.update({"model.norm": devices[-1], "lm_head": devices[-1]})
    return dm


# -- building ------------------------------------------------------------------------------
def _file_key(keys, files, name: str) -> str:
    """The checkpoint's name of the model tensor `name` (Mixtral files: `block_sparse_moe`
    where the transformers 5 module is `mlp`); one line naming it when absent."""
    for k in (name, name.replace(".mlp.", ".block_sparse_moe.")):
        if k in keys:
            return k
    raise CheckpointFormatError(files.folder, name, "this tensor (the model has it), it is missing")


def build_block(files, keys, fmt: str, scheme: str, groups: dict, spec, device, backend="unfused",
                keep_codes: bool = True):
    """The emulated sparse-MoE block of `spec` (found on the meta skeleton), every tensor on `device`;
    keep_codes=False (fused only) releases the unpacked codes once the kernel weights are built
    (nothing here holds the quant config after that)."""
    row = families.FAMILIES[spec.family]
    for attr, tensor in (("weight", "router_weight"), (row.router_bias, "router_bias")):
        if attr is None:
            continue
        name = _file_key(keys, files, f"{spec.name}.{row.router}.{attr}")
        meta = getattr(spec, tensor)  # the skeleton's: its shape, and the dtype transformers keeps it in
        t = cfiles.check_tensor(files, name, files.get(name), shape=tuple(meta.shape))
        setattr(spec, tensor, t.to(device=device, dtype=meta.dtype))
    if spec.name not in groups:
        raise CheckpointFormatError(files.folder, f"{spec.name}.experts", "quantized experts for every MoE block")
    tensors = detect.reader(fmt).block_tensors(files, spec.name, groups[spec.name], scheme)
    block = checkpoint_blocks.build_block(files, fmt, scheme, spec, tensors, device, backend, keep_codes=keep_codes)
    del tensors  # with keep_codes=False the experts hold the only reference left to the kernel weights' sources
    # the skeleton's meta tensors are not the layer's: the spec keeps only what the checkpoint gave
    spec.w13 = spec.w2 = None
    spec.options = {k: v for k, v in spec.options.items() if not (isinstance(v, torch.Tensor) and v.is_meta)}
    return block


def _device_of(dm: dict, name: str) -> str:
    parts = name.split(".")
    for i in range(len(parts), -1, -1):
        key = ".".join(parts[:i])
        if key in dm:
            return dm[key]
    raise CheckpointError(f"device_map places no module holding {name}")


def load(model_dir, devices: list[str] | None = None, device_map: dict | None = None, dtype=torch.bfloat16,
         backend: str = "unfused", progress=None, dispatch: bool = True, keep_codes: bool = True):
    """`dispatch=False` skips accelerate's hooks (placement only, e.g. onto
    the meta device in tests). `keep_codes` as build_block (the caller takes
    it from moe_swap.keep_codes_for).
    -> Loaded(model with hooks, {block name: emulated block}, block specs, harness scheme, device_map)."""
    from accelerate import dispatch_model, init_empty_weights
    from accelerate.utils import set_module_tensor_to_device
    from transformers import AutoConfig, AutoModelForCausalLM



    path = Path(model_dir) / "config.json"
    files, fmt, scheme = identify(model_dir)  # format, scheme, every expert tensor named (nothing read)
    if fmt not in FORMATS:
        raise CheckpointError(f"{path}: {fmt} checkpoint; loaded without a float model: {', '.join(FORMATS)}")
    keys = set(files.keys())
    groups = detect.reader(fmt).groups(keys)
    raw = files.config
    plain = {k: v for k, v in raw.items() if k not in ("quantization_config", "harness_synthetic")}
    config = AutoConfig.for_model(**plain)
    dm = dict(device_map) if device_map else device_map_for(raw, devices or ["cpu"])
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    blocks, specs = {}, []
    for spec in find_moe_blocks(model):
        dev = _device_of(dm, spec.name)
        block = build_block(files, keys, fmt, scheme, groups, spec, dev, backend, keep_codes=keep_codes)
        parent, _, child = spec.name.rpartition(".")
        setattr(model.get_submodule(parent), child, block)
        blocks[spec.name] = block
        specs.append(spec)
        if progress:
            progress(f"{spec.name}: experts on {dev}")
    dense = [n for n, _ in model.named_parameters() if not any(n.startswith(b + ".") for b in blocks)]
    # tied output embedding (tie_word_embeddings, the tiny model's producer checkpoints): the
    # checkpoint stores only the input embedding; tie_weights() points lm_head at it below
    tied = {"lm_head.weight"} if raw.get("tie_word_embeddings") and "lm_head.weight" not in keys else set()
    for pname in dense:
        if pname in tied:
            continue
        src = _file_key(keys, files, pname)
        set_module_tensor_to_device(model, pname, _device_of(dm, pname), value=files.get(src), dtype=dtype)
    if tied:
        model.tie_weights()
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if t.is_meta and str(_device_of(dm, n)) != "meta"]
    if left:
        raise CheckpointError(f"{model_dir}: {len(left)} tensor(s) not in the checkpoint (first: {left[0]})")
    parallel.check_placement(model, blocks, lambda n: _device_of(dm, n))
    if dispatch:
        # the model's inputs go to the embedding's device (accelerate would otherwise pick any of the map's)
        dispatch_model(model, device_map=dm, main_device=_device_of(dm, "model.embed_tokens"), force_hooks=True)
    return Loaded(model.eval(), blocks, specs, scheme, dm)
