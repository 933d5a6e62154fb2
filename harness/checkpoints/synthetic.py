"""Synthetic real-size MoE checkpoints in the compressed-tensors layout.

    moe-harness checkpoint synth --shape mixtral-8x7b --scheme nvfp4 --out DIR [--seed S]

Random weights (normal, std 0.02; norms 1) with a real model's shapes, written
as llm-compressor writes a compressed-tensors checkpoint: per-expert Linear
names as on the hub (Mixtral `block_sparse_moe.experts.{e}.w1/w3/w2`, Qwen3-MoE
`mlp.experts.{e}.gate_proj/up_proj/down_proj`), experts quantized, everything
else bf16 (attention, routers, embeddings and lm_head are in `ignore`).

- nvfp4 (`nvfp4-pack-quantized`): `weight_packed` uint8 [N, K/2] (low nibble
  first), `weight_scale` float8_e4m3fn [N, K/16], `weight_global_scale` fp32
  [1] (encode side, 448*6/amax; gate and up of an expert share one, as
  llm-compressor fuses them), `input_global_scale` fp32 [1] (encode side, from
  a stated activation amax, recorded in the config).
- mxfp4 (`mxfp4-pack-quantized`): `weight_packed` uint8 [N, K/2], `weight_scale`
  uint8 [N, K/32] (E8M0 bytes); activations dynamic.

Each weight is drawn from its own generator seeded from (seed, tensor name),
so a tensor does not depend on the write order. The generator runs on
`--device` (default: the GPU when present): CPU and GPU streams differ, so the
device is recorded next to the seed. Shards are written as they fill
(`--shard-gib`), so host memory stays bounded by one shard.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import torch

import harness.formats as hf

from harness.models.shapes import GiB, Shape, get_shape
from harness.moe.schemes import get_scheme
from harness.models import tokenizer as tok

# `--scheme` -> the harness scheme row written; the weight format, its block
# size and the compressed-tensors format name ("<weight format>-pack-quantized")
# are read from that row.
SCHEMES = {"nvfp4": "nvfp4", "mxfp4": "w_mxfp4_a_mxfp4"}


def weight_format(scheme: str) -> str:
    """The harness.formats row of the scheme's weights."""
    return get_scheme(SCHEMES[scheme]).weight_fmt


def block_size(scheme: str) -> int:
    return hf.get_format(weight_format(scheme)).block_size


def ct_format(scheme: str) -> str:
    """The compressed-tensors format name of the scheme's weights."""
    return f"{weight_format(scheme)}-pack-quantized"
STD = 0.02
ACT_AMAX = 8.0  # nvfp4 input_global_scale = 448*6 / ACT_AMAX: a stated value, not calibrated
SYNTH_KEY = "harness_synthetic"


# -- names ---------------------------------------------------------------------------------
def moe_prefix(shape: Shape, layer: int) -> str:
    return f"model.layers.{layer}." + ("block_sparse_moe" if shape.family == "mixtral" else "mlp")


def expert_projections(shape: Shape) -> tuple[str, str, str]:
    """(gate, up, down) Linear names of one expert on the hub."""
    return ("w1", "w3", "w2") if shape.family == "mixtral" else ("gate_proj", "up_proj", "down_proj")


def dense_tensors(shape: Shape, layer: int) -> list[tuple[str, tuple, str]]:
    """(name, shape, init) of the bf16 tensors of one decoder layer."""
    p = f"model.layers.{layer}."
    q, kv, H = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.hidden
    out = [(p + "input_layernorm.weight", (H,), "ones"), (p + "post_attention_layernorm.weight", (H,), "ones"),
           (p + "self_attn.q_proj.weight", (q, H), "normal"), (p + "self_attn.k_proj.weight", (kv, H), "normal"),
           (p + "self_attn.v_proj.weight", (kv, H), "normal"), (p + "self_attn.o_proj.weight", (H, q), "normal"),
           (moe_prefix(shape, layer) + ".gate.weight", (shape.experts, H), "normal")]
    if shape.family == "qwen3_moe":
        out += [(p + "self_attn.q_norm.weight", (shape.head_dim,), "ones"),
                (p + "self_attn.k_norm.weight", (shape.head_dim,), "ones")]
    return out


def outer_tensors(shape: Shape) -> list[tuple[str, tuple, str]]:
    return [("model.embed_tokens.weight", (shape.vocab, shape.hidden), "normal"),
            ("model.norm.weight", (shape.hidden,), "ones"),
            ("lm_head.weight", (shape.vocab, shape.hidden), "normal")]


# -- config ---------------------------------------------------------------------------------
def quantization_config(shape: Shape, scheme: str) -> dict:
    """quantization_config as compressed-tensors serializes it (config_groups,
    format, ignore, quant_method, quantization_status)."""
    block, fmt = block_size(scheme), ct_format(scheme)
    gate, up, down = expert_projections(shape)
    moe = "block_sparse_moe" if shape.family == "mixtral" else "mlp"
    targets = [rf"re:.*{moe}\.experts\.\d+\.({gate}|{up}|{down})$"]
    fp4 = dict(num_bits=4, type="float", symmetric=True, group_size=block, block_structure=None,
               actorder=None, observer_kwargs={})
    if hf.get_format(weight_format(scheme)).has_global_scale:
        weights = dict(fp4, strategy="tensor_group", dynamic=False, observer="static_minmax",
                       scale_dtype="torch.float8_e4m3fn", zp_dtype="torch.float8_e4m3fn")
        acts = dict(fp4, strategy="tensor_group", dynamic="local", observer="static_minmax",
                    scale_dtype="torch.float8_e4m3fn", zp_dtype="torch.float8_e4m3fn")
    else:
        weights = dict(fp4, strategy="group", dynamic=False, observer="minmax",
                       scale_dtype="torch.uint8", zp_dtype="torch.uint8")
        acts = dict(fp4, strategy="group", dynamic=True, observer=None,
                    scale_dtype="torch.uint8", zp_dtype="torch.uint8")
    return {
        "config_groups": {"group_0": {"targets": targets, "weights": weights, "input_activations": acts,
                                      "output_activations": None, "format": fmt}},
        "format": fmt, "global_compression_ratio": None,
        "ignore": ["lm_head", rf"re:.*{moe}\.gate$", "re:.*self_attn.*"],
        "kv_cache_scheme": None, "quant_method": "compressed-tensors", "quantization_status": "compressed",
        "sparsity_config": {}, "transform_config": {},
    }


def make_config(shape: Shape, scheme: str, seed: int, device: str) -> dict:
    cfg = shape.hf_config()
    cfg["quantization_config"] = quantization_config(shape, scheme)
    cfg[SYNTH_KEY] = {"shape": shape.name, "scheme": scheme, "harness_scheme": SCHEMES[scheme],
                      "seed": seed, "rng_device": device, "std": STD,
                      "activation_amax": ACT_AMAX if hf.get_format(weight_format(scheme)).has_global_scale else None,
                      "weights": "normal(0, std) per tensor, generator seeded by (seed, crc32(name)); norms 1"}
    return cfg


# -- tensors --------------------------------------------------------------------------------
def tensor_seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2 ** 63)


def random_normal(name: str, size: tuple, seed: int, device: str) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(tensor_seed(seed, name))
    return torch.randn(size, generator=g, device=device, dtype=torch.float32) * STD


def expert_tensors(shape: Shape, scheme: str, layer: int, expert: int, seed: int, device: str) -> dict:
    """The quantized gate/up/down Linear tensors of one expert (compressed-tensors names)."""
    base = f"{moe_prefix(shape, layer)}.experts.{expert}."
    gate, up, down = expert_projections(shape)
    H, I = shape.hidden, shape.moe_intermediate
    ws = {n: random_normal(base + n + ".weight", size, seed, device)
          for n, size in ((gate, (I, H)), (up, (I, H)), (down, (H, I)))}
    out = {}
    fmt = weight_format(scheme)
    if hf.get_format(fmt).has_global_scale:
        fused = hf.nvfp4_global_scale(torch.maximum(ws[gate].abs().amax(), ws[up].abs().amax()))
        act = hf.nvfp4_global_scale(torch.tensor(ACT_AMAX, device=device))
        for n, w in ws.items():
            gs = fused if n != down else hf.nvfp4_global_scale(w.abs().amax())
            q = hf.quantize(w, fmt, global_scale=gs)
            out[base + n + ".weight_packed"] = hf.pack_fp4(q.codes)
            out[base + n + ".weight_scale"] = q.scales.view(torch.float8_e4m3fn)
            out[base + n + ".weight_global_scale"] = gs.reshape(1).to(torch.float32).clone()
            out[base + n + ".input_global_scale"] = act.reshape(1).to(torch.float32).clone()
    else:
        mode = get_scheme(SCHEMES[scheme]).scale_mode
        for n, w in ws.items():
            q = hf.quantize(w, fmt, scale_mode=mode)
            out[base + n + ".weight_packed"] = hf.pack_fp4(q.codes)
            out[base + n + ".weight_scale"] = q.scales
    return out


def dense_tensor(name: str, size: tuple, init: str, seed: int, device: str) -> torch.Tensor:
    if init == "ones":
        return torch.ones(size, dtype=torch.bfloat16)
    return random_normal(name, size, seed, device).to(torch.bfloat16)


def iter_tensors(shape: Shape, scheme: str, seed: int, device: str):
    """(name, CPU tensor) in file order: embeddings, then layer by layer, then the head."""
    outer = {n: (s, i) for n, s, i in outer_tensors(shape)}
    yield "model.embed_tokens.weight", dense_tensor("model.embed_tokens.weight", *outer["model.embed_tokens.weight"],
                                                     seed, device).cpu()
    for layer in range(shape.layers):
        for name, size, init in dense_tensors(shape, layer):
            yield name, dense_tensor(name, size, init, seed, device).cpu()
        for e in range(shape.experts):
            for name, t in expert_tensors(shape, scheme, layer, e, seed, device).items():
                yield name, t.cpu()
    for name in ("model.norm.weight", "lm_head.weight"):
        yield name, dense_tensor(name, *outer[name], seed, device).cpu()


# -- writing --------------------------------------------------------------------------------
def write(shape_name: str, scheme: str, out, seed: int = 0, device: str | None = None,
          shard_bytes: int = 4 * GiB, progress=None) -> dict:
    """Write the checkpoint into `out` (created; must be empty or absent).
    Everything is written into a temporary folder next to `out`, renamed to
    `out` when complete; interrupted or failed, the temporary folder is
    removed. Returns a summary."""
    from safetensors.torch import save_file


    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    shape = get_shape(shape_name)
    if shape.hidden % block_size(scheme) or shape.moe_intermediate % block_size(scheme):
        raise ValueError(f"{shape.name}: hidden and moe_intermediate must be multiples of the {scheme} block")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    final_out = Path(out)
    if final_out.exists() and not final_out.is_dir():
        raise ValueError(f"--out {final_out}: not a folder (it is a file)")
    if final_out.is_dir() and any(final_out.iterdir()):
        raise ValueError(f"--out {final_out}: folder is not empty")
    final_out.parent.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f".{final_out.name}.tmp-", dir=final_out.parent))
    try:
        summary = _write_into(out, shape, scheme, seed, device, shard_bytes, progress, save_file)
        if final_out.is_dir():
            final_out.rmdir()
        out.rename(final_out)
    finally:
        if out.exists():
            shutil.rmtree(out, ignore_errors=True)
    return dict(summary, out=str(final_out))


def _write_into(out: Path, shape, scheme, seed, device, shard_bytes, progress, save_file) -> dict:
    shard, size, names, weight_map, total = {}, 0, [], {}, 0

    def flush():
        nonlocal shard, size
        if shard:
            tmp = out / f"shard-{len(names):05d}.tmp"
            save_file(shard, str(tmp), metadata={"format": "pt"})
            names.append(tmp)
            for n in shard:
                weight_map[n] = tmp.name
            if progress:
                progress(f"shard {len(names)}: {size / GiB:.2f} GiB, {len(shard)} tensors")
        shard, size = {}, 0

    with torch.no_grad():
        for name, t in iter_tensors(shape, scheme, seed, device):
            nbytes = t.numel() * t.element_size()
            if shard and size + nbytes > shard_bytes:
                flush()
            shard[name] = t
            size += nbytes
            total += nbytes
        flush()
    final = {}
    for i, tmp in enumerate(names):
        final[tmp.name] = f"model-{i + 1:05d}-of-{len(names):05d}.safetensors"
        os.replace(tmp, out / final[tmp.name])
    index = {"metadata": {"total_size": total}, "weight_map": {n: final[f] for n, f in sorted(weight_map.items())}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    cfg = make_config(shape, scheme, seed, device)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    tok.save(out)  # the harness' character tokenizer: ids below the vocabulary, no download
    return {"out": str(out), "shape": shape.name, "scheme": scheme, "seed": seed, "rng_device": device,
            "shards": len(names), "bytes": total, "params": shape.params}
