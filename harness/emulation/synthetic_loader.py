"""Load a compressed-tensors MoE checkpoint (llm-compressor's layout, which
`checkpoint synth` writes) straight into a transformers model whose sparse-MoE
blocks are harness.moe emulation layers, each layer on its device: no float
model is needed and the dense experts never exist.

The expert tensors are read by the compressed-tensors reader
(read_compressed_tensors.py: format and scheme checks, stacking into the
fused [E, ...] layout), one layer at a time, moved to the layer's device and
turned into a quant config there by harness.moe.loaders. The model skeleton
is built on the meta device; the other tensors (bf16: attention, norms,
routers, embeddings) are set on their layer's device; accelerate hooks
(`dispatch_model`) then move the activations between layers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from harness.checkpoints import files as cfiles
from harness.checkpoints import read_compressed_tensors
from harness.emulation.moe_swap import EmulatedSparseMoeBlock, MoEBlockSpec
from harness.moe.experts import make_experts
from harness.moe.layer import FusedMoE
from harness.checkpoints.errors import CheckpointFormatError
from harness.emulation import parallel
from harness.checkpoints import detect

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


def is_compressed_tensors(model_dir) -> bool:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return False
    qc = read_config(model_dir).get("quantization_config") or {}
    return qc.get("quant_method") == "compressed-tensors"


def checkpoint_scheme(model_dir) -> str:
    """The harness scheme of a compressed-tensors folder, as its reader checks it."""
    return read_compressed_tensors.scheme(cfiles.CheckpointFiles(model_dir))


def _arch(cfg: dict, path) -> SimpleNamespace:
    mt = cfg.get("model_type")
    if mt == "mixtral":
        return SimpleNamespace(family=mt, moe="block_sparse_moe", experts=cfg["num_local_experts"],
                               proj=("w1", "w3", "w2"), renormalize=True)
    if mt == "qwen3_moe":
        # transformers 5 writes num_local_experts for qwen3_moe (producer checkpoints), 4.x num_experts
        experts = cfg.get("num_experts", cfg.get("num_local_experts"))
        if not isinstance(experts, int):
            raise CheckpointError(f"{path}: config.json: neither num_experts nor num_local_experts is an integer")
        return SimpleNamespace(family=mt, moe="mlp", experts=experts,
                               proj=("gate_proj", "up_proj", "down_proj"),
                               renormalize=bool(cfg.get("norm_topk_prob", False)))
    raise CheckpointError(f"{path}: model_type {mt!r}: this loader reads mixtral and qwen3_moe")


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


def device_map_for(cfg: dict, devices: list[str]) -> dict:
    """accelerate device_map: embedding on the first device, the final norm and
    lm_head on the last, the decoder layers (all of one size) split evenly."""
    where = balanced_layers([1] * cfg["num_hidden_layers"], len(devices))
    dm = {"model.embed_tokens": devices[0], "model.rotary_emb": devices[0]}
    dm.update({f"model.layers.{i}": devices[d] for i, d in enumerate(where)})
    dm.update({"model.norm": devices[-1], "lm_head": devices[-1]})
    return dm


# -- building ------------------------------------------------------------------------------
def build_block(files, reader, groups: dict, arch, layer: int, scheme: str, top_k: int, device,
                backend="unfused", keep_codes: bool = True):
    """The emulated sparse-MoE block of `layer`, every tensor on `device`;
    keep_codes=False (fused only) releases the unpacked codes once the kernel
    weights are built (nothing here holds the quant config after that)."""

    hub = f"model.layers.{layer}.{arch.moe}"          # the file's name (Mixtral: block_sparse_moe)
    name = f"model.layers.{layer}.mlp"                 # the module's (and the reader's group key)
    if name not in groups:
        raise CheckpointFormatError(files.folder, f"{hub}.experts", "quantized experts for every decoder layer")
    t = {k: (v.to(device) if isinstance(v, torch.Tensor) else v)
         for k, v in reader.block_tensors(files, name, groups[name], scheme).items()}
    try:
        qc = reader.quant_config(t, scheme)
    except ValueError as e:
        raise CheckpointFormatError(files.folder, f"{hub} experts", f"tensors the loader accepts ({e})") from e
    router = files.get(f"{hub}.gate.weight").to(device)
    spec = MoEBlockSpec(name=name, family=arch.family, router_weight=router, top_k=top_k,
                        options=dict(renormalize=arch.renormalize, scoring="softmax", activation="silu"))
    experts = make_experts(qc, backend=backend, keep_codes=keep_codes)
    del qc, t  # with keep_codes=False the experts hold the only reference left to the kernel weights' sources
    fused = FusedMoE(experts, top_k=top_k, **spec.routing_options())
    return spec, EmulatedSparseMoeBlock(spec, fused, scheme)


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
    files = cfiles.CheckpointFiles(model_dir)
    fmt = detect.detect(files.config, path)
    if fmt != "compressed-tensors":
        raise CheckpointError(f"{path}: {fmt} checkpoint; loaded without a float model: compressed-tensors only")
    reader = detect.reader(fmt)
    scheme = reader.scheme(files)
    groups = cfiles.expert_groups(files.keys())
    raw = files.config
    arch = _arch(raw, path)
    plain = {k: v for k, v in raw.items() if k not in ("quantization_config", "harness_synthetic")}
    config = AutoConfig.for_model(**plain)
    dm = dict(device_map) if device_map else device_map_for(raw, devices or ["cpu"])
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    blocks, specs = {}, []
    for layer in range(raw["num_hidden_layers"]):
        dev = _device_of(dm, f"model.layers.{layer}")
        spec, block = build_block(files, reader, groups, arch, layer, scheme, raw["num_experts_per_tok"], dev,
                                  backend, keep_codes=keep_codes)
        parent, _, child = spec.name.rpartition(".")
        setattr(model.get_submodule(parent), child, block)
        blocks[spec.name] = block
        specs.append(spec)
        if progress:
            progress(f"layer {layer}: experts on {dev}")
    hub = {f"model.layers.{i}.mlp.": f"model.layers.{i}.{arch.moe}." for i in range(raw["num_hidden_layers"])}
    dense = [n for n, _ in model.named_parameters() if not any(n.startswith(b + ".") for b in blocks)]
    # tied output embedding (tie_word_embeddings, the tiny model's producer checkpoints): the
    # checkpoint stores only the input embedding; tie_weights() points lm_head at it below
    tied = {"lm_head.weight"} if raw.get("tie_word_embeddings") and "lm_head.weight" not in files.keys() else set()
    for pname in dense:
        if pname in tied:
            continue
        src = pname
        for k, v in hub.items():
            src = src.replace(k, v)
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
