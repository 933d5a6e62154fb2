"""Load a compressed-tensors MoE checkpoint (the layout `checkpoint synth`
writes, see synthetic.py) into a transformers model whose sparse-MoE blocks
are harness.moe emulation layers, each layer on its device.

Only this layout: experts quantized (nvfp4-pack-quantized, or
mxfp4-pack-quantized with dynamic mxfp4 activations), everything else bf16.
The dense experts are never materialized: the model skeleton is built on the
meta device, each layer's expert tensors are read shard by shard, stacked
into the fused [E, ...] layout and handed to harness.moe.loaders on the
layer's device; the other tensors are set on their layer's device. accelerate
hooks (`dispatch_model`) then move the activations between layers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

FORMAT_SCHEME = {"nvfp4-pack-quantized": "nvfp4", "mxfp4-pack-quantized": "w_mxfp4_a_mxfp4"}


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
    path = Path(model_dir) / "config.json"
    qc = read_config(model_dir).get("quantization_config") or {}
    groups = qc.get("config_groups") or {}
    if len(groups) != 1:
        raise CheckpointError(f"{path}: quantization_config.config_groups: expected one group, got {len(groups)}")
    (group,) = groups.values()
    fmt = group.get("format") or qc.get("format")
    if fmt not in FORMAT_SCHEME:
        raise CheckpointError(f"{path}: quantization_config.format {fmt!r}: this loader reads "
                              f"{', '.join(FORMAT_SCHEME)}")
    acts = group.get("input_activations") or {}
    if fmt == "mxfp4-pack-quantized" and not (acts.get("num_bits") == 4 and acts.get("dynamic") is True):
        raise CheckpointError(f"{path}: config_groups input_activations: mxfp4 weights need dynamic mxfp4 "
                              "activations for scheme w_mxfp4_a_mxfp4")
    if qc.get("quantization_status") != "compressed":
        raise CheckpointError(f"{path}: quantization_status {qc.get('quantization_status')!r}, expected 'compressed'")
    return FORMAT_SCHEME[fmt]


def _arch(cfg: dict, path) -> SimpleNamespace:
    mt = cfg.get("model_type")
    if mt == "mixtral":
        return SimpleNamespace(family=mt, moe="block_sparse_moe", experts=cfg["num_local_experts"],
                               proj=("w1", "w3", "w2"), renormalize=True)
    if mt == "qwen3_moe":
        return SimpleNamespace(family=mt, moe="mlp", experts=cfg["num_experts"],
                               proj=("gate_proj", "up_proj", "down_proj"),
                               renormalize=bool(cfg.get("norm_topk_prob", False)))
    raise CheckpointError(f"{path}: model_type {mt!r}: this loader reads mixtral and qwen3_moe")


class TensorIndex:
    """name -> shard file; tensors read one at a time (host memory: one tensor)."""

    def __init__(self, model_dir):
        self.dir = Path(model_dir)
        index = self.dir / "model.safetensors.index.json"
        if index.is_file():
            self.files = json.loads(index.read_text())["weight_map"]
        else:
            from safetensors import safe_open

            single = self.dir / "model.safetensors"
            if not single.is_file():
                raise CheckpointError(f"{self.dir}: neither model.safetensors.index.json nor model.safetensors")
            with safe_open(str(single), framework="pt") as f:
                self.files = {k: single.name for k in f.keys()}
        self._open = {}

    def get(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        if name not in self.files:
            raise CheckpointError(f"{self.dir}: tensor {name} is missing")
        f = self.files[name]
        if f not in self._open:
            self._open = {f: safe_open(str(self.dir / f), framework="pt")}  # one shard open at a time
        return self._open[f].get_tensor(name)

    def names(self):
        return self.files.keys()


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
def expert_tensors(index: TensorIndex, arch, layer: int, scheme: str) -> dict:
    """One layer's experts in harness.moe.loaders' fused layout (CPU tensors)."""
    gate, up, down = arch.proj
    base = f"model.layers.{layer}.{arch.moe}.experts."

    def stack(proj, field):
        return torch.stack([index.get(f"{base}{e}.{proj}.{field}") for e in range(arch.experts)])

    t = {"w13_weight_packed": torch.cat([stack(gate, "weight_packed"), stack(up, "weight_packed")], dim=1),
         "w13_weight_scale": torch.cat([stack(gate, "weight_scale"), stack(up, "weight_scale")], dim=1),
         "w2_weight_packed": stack(down, "weight_packed"), "w2_weight_scale": stack(down, "weight_scale")}
    if scheme == "nvfp4":
        t["w13_weight_global_scale"] = torch.cat([stack(gate, "weight_global_scale"),
                                                  stack(up, "weight_global_scale")], dim=1)  # [E, 2]: must agree
        t["w2_weight_global_scale"] = stack(down, "weight_global_scale").reshape(-1)
        t["w13_input_global_scale"] = torch.cat([stack(gate, "input_global_scale"),
                                                 stack(up, "input_global_scale")]).reshape(-1)
        t["w2_input_global_scale"] = stack(down, "input_global_scale").reshape(-1)
    return t


def build_block(index: TensorIndex, arch, layer: int, scheme: str, top_k: int, device, backend="unfused"):
    """The emulated sparse-MoE block of `layer`, every tensor on `device`."""
    from harness.lmeval.moe_swap import EmulatedSparseMoeBlock
    from harness.moe import loaders
    from harness.moe.experts import make_experts
    from harness.moe.layer import FusedMoE

    t = {k: v.to(device) for k, v in expert_tensors(index, arch, layer, scheme).items()}
    if scheme == "nvfp4":
        qc = loaders.load_compressed_tensors_nvfp4(t)
    else:
        qc = loaders.load_ocp_mx({"w13_weight": t["w13_weight_packed"], "w13_weight_scale": t["w13_weight_scale"],
                                  "w2_weight": t["w2_weight_packed"], "w2_weight_scale": t["w2_weight_scale"]},
                                 scheme=scheme)
    router = index.get(f"model.layers.{layer}.{arch.moe}.gate.weight").to(device)
    name = f"model.layers.{layer}.mlp"
    spec = SimpleNamespace(name=name, family=arch.family, router_weight=router, top_k=top_k,
                           renormalize=arch.renormalize, shared_expert=None, shared_expert_gate=None)
    fused = FusedMoE(make_experts(qc, backend=backend), top_k=top_k, renormalize=arch.renormalize,
                     scoring="softmax", activation="silu")
    return spec, EmulatedSparseMoeBlock(spec, fused, scheme)


def _device_of(dm: dict, name: str) -> str:
    parts = name.split(".")
    for i in range(len(parts), -1, -1):
        key = ".".join(parts[:i])
        if key in dm:
            return dm[key]
    raise CheckpointError(f"device_map places no module holding {name}")


def load(model_dir, devices: list[str] | None = None, device_map: dict | None = None, dtype=torch.bfloat16,
         backend: str = "unfused", progress=None, dispatch: bool = True):
    """`dispatch=False` skips accelerate's hooks (placement only, e.g. onto
    the meta device in tests).
    -> Loaded(model with hooks, {block name: emulated block}, block specs, harness scheme, device_map)."""
    from accelerate import dispatch_model, init_empty_weights
    from accelerate.utils import set_module_tensor_to_device
    from transformers import AutoConfig, AutoModelForCausalLM

    from harness.lmeval import parallel

    path = Path(model_dir) / "config.json"
    scheme = checkpoint_scheme(model_dir)
    raw = read_config(model_dir)
    arch = _arch(raw, path)
    plain = {k: v for k, v in raw.items() if k not in ("quantization_config", "harness_synthetic")}
    config = AutoConfig.for_model(**plain)
    dm = dict(device_map) if device_map else device_map_for(raw, devices or ["cpu"])
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    index = TensorIndex(model_dir)
    blocks, specs = {}, []
    for layer in range(raw["num_hidden_layers"]):
        dev = _device_of(dm, f"model.layers.{layer}")
        spec, block = build_block(index, arch, layer, scheme, raw["num_experts_per_tok"], dev, backend)
        parent, _, child = spec.name.rpartition(".")
        setattr(model.get_submodule(parent), child, block)
        blocks[spec.name] = block
        specs.append(spec)
        if progress:
            progress(f"layer {layer}: experts on {dev}")
    hub = {f"model.layers.{i}.mlp.": f"model.layers.{i}.{arch.moe}." for i in range(raw["num_hidden_layers"])}
    dense = [n for n, _ in model.named_parameters() if not any(n.startswith(b + ".") for b in blocks)]
    for pname in dense:
        src = pname
        for k, v in hub.items():
            src = src.replace(k, v)
        set_module_tensor_to_device(model, pname, _device_of(dm, pname), value=index.get(src), dtype=dtype)
    left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if t.is_meta and str(_device_of(dm, n)) != "meta"]
    if left:
        raise CheckpointError(f"{model_dir}: {len(left)} tensor(s) not in the checkpoint (first: {left[0]})")
    parallel.check_placement(model, blocks, lambda n: _device_of(dm, n))
    if dispatch:
        # the model's inputs go to the embedding's device (accelerate would otherwise pick any of the map's)
        dispatch_model(model, device_map=dm, main_device=_device_of(dm, "model.embed_tokens"), force_hooks=True)
    return Loaded(model.eval(), blocks, specs, scheme, dm)
