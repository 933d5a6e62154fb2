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

The families beyond Mixtral / Qwen3-MoE are written in their producers'
layouts (LAYOUTS): DeepSeek-V3 in ModelOpt's NVFP4 (`weight` uint8,
`weight_scale` e4m3, `weight_scale_2` and `input_scale` fp32 [] decode side,
routed experts `mlp.experts.{e}.gate_proj/up_proj/down_proj` and
`mlp.shared_experts.*` quantized; dense first layers, MLA attention, router
and its fp32 `e_score_correction_bias` unquantized), Llama-4 text in
compressed-tensors as llm-compressor writes Llama-4 (per-expert
`feed_forward.experts.{e}.gate_proj/up_proj/down_proj` and
`feed_forward.shared_expert.*` quantized, the router not), gpt-oss in the
gpt-oss MXFP4 layout (`mlp.experts.gate_up_proj_blocks/_scales` [E, 2I,
H/32, 16] / [E, 2I, H/32] with gate/up rows interleaved, down_proj alike,
bf16 `gate_up_proj_bias` [E, 2I] interleaved and `down_proj_bias` [E, H]).
Their non-expert tensors (names, shapes) are the state_dict of transformers'
own model built from the written config.json on the meta device, so the
attention layouts (MLA, sinks, biases) are transformers' by construction.

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

from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForCausalLM

import harness.formats as hf

from harness.models.shapes import GiB, Shape, get_shape
from harness.moe.schemes import get_scheme
from harness.models import tokenizer as tok
from harness.checkpoints import read_gptoss

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
    layout = LAYOUTS.get(shape.family)
    cfg["quantization_config"] = (quantization_config(shape, scheme) if layout is None
                                  else layout_quantization_config(layout, shape, scheme))
    cfg[SYNTH_KEY] = {"shape": shape.name, "scheme": scheme, "harness_scheme": harness_scheme(shape, scheme),
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
    return ct_projections(base, expert_projections(shape), shape.hidden, shape.moe_intermediate, scheme, seed, device)


def ct_projections(base: str, names: tuple, H: int, I: int, scheme: str, seed: int, device: str) -> dict:
    """One gate/up/down MLP at `base` (an expert or a shared expert) in compressed-tensors' layout."""
    gate, up, down = names
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


# -- the families beyond mixtral / qwen3_moe: their producers' layouts ---------------------
@dataclass(frozen=True)
class Layout:
    """How a family's producer checkpoint stores its MoE blocks."""
    fmt: str                 # the reader format (harness/checkpoints/detect.py)
    block: str               # the MoE block's attribute in a decoder layer
    shared: str | None       # the shared expert's attribute in the block (quantized like an expert)
    router: str              # the router's attribute in the block (unquantized)
    schemes: tuple           # the --scheme values this layout writes
    producer: str            # who writes it for the real model


PROJ_NAMES = ("gate_proj", "up_proj", "down_proj")
LAYOUTS = {
    # nvidia/DeepSeek-R1-NVFP4 is a ModelOpt export
    "deepseek_v3": Layout("modelopt", "mlp", "shared_experts", "gate", ("nvfp4",), "ModelOpt"),
    # RedHatAI/Llama-4-Scout-17B-16E-Instruct-NVFP4: llm-compressor, per-expert Linear names
    # (vLLM's llama4.py loads them through its non-fused expert mapping)
    "llama4_text": Layout("compressed-tensors", "feed_forward", "shared_expert", "router", ("nvfp4", "mxfp4"),
                          "llm-compressor"),
    # openai/gpt-oss-120b as OpenAI publishes it (transformers' and vLLM's mxfp4 loaders)
    "gpt_oss": Layout("gpt-oss", "mlp", None, "router", ("mxfp4",), "OpenAI"),
}
GPTOSS_SCALE_MODE = "even"  # the harness' w_mxfp4 weight scale mode, as make_gptoss.py writes the layout


def harness_scheme(shape: Shape, scheme: str) -> str:
    """The harness scheme the written checkpoint's reader reports."""
    layout = LAYOUTS.get(shape.family)
    if layout is not None and layout.fmt == "gpt-oss":
        return read_gptoss.SCHEME  # the layout's one scheme (W4A16)
    if layout is not None and layout.fmt == "modelopt":
        return "nvfp4"
    return SCHEMES[scheme]


def moe_blocks(shape: Shape) -> list[str]:
    layout = LAYOUTS[shape.family]
    return [f"model.layers.{i}.{layout.block}" for i in range(shape.dense_layers, shape.layers)]


def layout_quantization_config(layout: Layout, shape: Shape, scheme: str) -> dict:
    blk = rf"\.{layout.block}\."
    if layout.fmt == "compressed-tensors":
        qc = quantization_config(shape, scheme)
        experts = rf"re:.*{blk}(experts\.\d+|{layout.shared})\.({'|'.join(PROJ_NAMES)})$"
        qc["config_groups"]["group_0"]["targets"] = [experts]
        qc["ignore"] = ["lm_head", rf"re:.*{blk}{layout.router}$", "re:.*self_attn.*"]
        return qc
    if layout.fmt == "modelopt":
        exclude = ["lm_head", "model.layers.*.self_attn*", f"model.layers.*.{layout.block}.{layout.router}"]
        exclude += [f"model.layers.{i}.{layout.block}*" for i in range(shape.dense_layers)]
        return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                "exclude_modules": exclude, "producer": {"name": "modelopt"}}
    return {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", f"model.layers.*.{layout.block}.{layout.router}", "model.embed_tokens", "lm_head"]}


def modelopt_projections(base: str, H: int, I: int, seed: int, device: str) -> dict:
    """One gate/up/down MLP at `base` in ModelOpt's NVFP4 layout: weight_scale_2 and
    input_scale DECODE side (amax / 2688), gate and up sharing one weight_scale_2;
    the codes are those of the encode-side scale the harness loader derives, 1/weight_scale_2."""
    gate, up, down = PROJ_NAMES
    ws = {n: random_normal(base + n + ".weight", size, seed, device)
          for n, size in ((gate, (I, H)), (up, (I, H)), (down, (H, I)))}
    num = torch.tensor(hf.NVFP4_GS_NUMERATOR, dtype=torch.float32, device=device)
    fused = torch.maximum(ws[gate].abs().amax(), ws[up].abs().amax()) / num
    act = torch.tensor(ACT_AMAX, dtype=torch.float32, device=device) / num
    out = {}
    for n, w in ws.items():
        ws2 = fused if n != down else w.abs().amax() / num
        q = hf.quantize(w, "nvfp4", global_scale=hf.global_scale_from_modelopt(ws2))
        out[base + n + ".weight"] = hf.pack_fp4(q.codes)
        out[base + n + ".weight_scale"] = q.scales.view(torch.float8_e4m3fn)
        out[base + n + ".weight_scale_2"] = ws2.reshape(()).to(torch.float32).clone()
        out[base + n + ".input_scale"] = act.reshape(()).clone()
    return out


def interleave_rows(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up [E, I, ...] -> [E, 2I, ...], gate j at row 2j and up j at 2j+1 (gpt-oss)."""
    return torch.stack([gate, up], dim=2).reshape(gate.shape[0], -1, *gate.shape[2:])


def gptoss_experts(block: str, E: int, H: int, I: int, seed: int, device: str) -> dict:
    """A block's experts in the gpt-oss MXFP4 layout; each expert's gate, up and down drawn
    from its own per-expert name (`<block>.experts.<e>.gate_proj.weight`, ...) and quantized
    (MXFP4, scale mode even, RNE) before stacking, so one layer's float weights never exist at once."""
    parts: dict = {k: [] for k in ("gate", "up", "down")}
    for e in range(E):
        base = f"{block}.experts.{e}."
        for k, proj, size in (("gate", "gate_proj", (I, H)), ("up", "up_proj", (I, H)), ("down", "down_proj", (H, I))):
            q = hf.quantize(random_normal(base + proj + ".weight", size, seed, device), "mxfp4",
                            scale_mode=GPTOSS_SCALE_MODE, rounding="rne")
            parts[k].append((hf.pack_fp4(q.codes).reshape(*q.scales.shape, 16).cpu(), q.scales.cpu()))
    stack = {k: (torch.stack([p for p, _ in v]), torch.stack([s for _, s in v])) for k, v in parts.items()}
    out = {}
    out[f"{block}.experts.gate_up_proj_blocks"] = interleave_rows(stack["gate"][0], stack["up"][0])
    out[f"{block}.experts.gate_up_proj_scales"] = interleave_rows(stack["gate"][1], stack["up"][1])
    out[f"{block}.experts.down_proj_blocks"], out[f"{block}.experts.down_proj_scales"] = stack["down"]
    for name, size in (("gate_up_proj_bias", (E, 2 * I)), ("down_proj_bias", (E, H))):
        out[f"{block}.experts.{name}"] = random_normal(f"{block}.experts.{name}", size, seed, device).to(torch.bfloat16)
    return out


def skeleton(shape: Shape) -> dict:
    """{name: shape} of every tensor of transformers' model for the shape's config.json,
    built on the meta device (nothing allocated)."""
    plain = shape.hf_config()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**plain))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def layout_tensors(shape: Shape, scheme: str, seed: int, device: str):
    """(name, CPU tensor) of a family written in its producer's layout, in transformers'
    state_dict order: each MoE block's experts (and shared expert) where transformers keeps
    them, in the producer's names and quantization; every other tensor as the skeleton has it
    (norm weights ones, DeepSeek's correction bias fp32, the rest bf16 normal(0, std))."""
    layout = LAYOUTS[shape.family]
    blocks = moe_blocks(shape)
    done = set()
    H = shape.hidden
    for name, size in skeleton(shape).items():
        block = next((b for b in blocks if name.startswith(b + ".")), None)
        rest = name[len(block) + 1:] if block else ""
        if block and rest.startswith("experts."):
            if (block, "experts") in done:
                continue
            done.add((block, "experts"))
            if layout.fmt == "gpt-oss":
                t = gptoss_experts(block, shape.experts, H, shape.moe_intermediate, seed, device)
            else:
                t = {}
                for e in range(shape.experts):
                    t.update(_projections(layout, f"{block}.experts.{e}.", H, shape.moe_intermediate, scheme,
                                          seed, device))
            yield from ((k, v.cpu()) for k, v in t.items())
            continue
        if block and layout.shared and rest.startswith(layout.shared + "."):
            if (block, "shared") not in done:
                done.add((block, "shared"))
                t = _projections(layout, f"{block}.{layout.shared}.", H, shape.shared_intermediate, scheme, seed, device)
                yield from ((k, v.cpu()) for k, v in t.items())
            continue
        if name.endswith("norm.weight"):
            yield name, torch.ones(size, dtype=torch.bfloat16)
        elif name.endswith(".e_score_correction_bias"):
            yield name, random_normal(name, size, seed, device).cpu()  # fp32, as DeepSeek-V3 stores it
        else:
            yield name, random_normal(name, size, seed, device).to(torch.bfloat16).cpu()


def _projections(layout: Layout, base: str, H: int, I: int, scheme: str, seed: int, device: str) -> dict:
    if layout.fmt == "modelopt":
        return modelopt_projections(base, H, I, seed, device)
    return ct_projections(base, PROJ_NAMES, H, I, scheme, seed, device)


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
    layout = LAYOUTS.get(shape.family)
    if layout is not None and scheme not in layout.schemes:
        raise ValueError(f"{shape.name}: --scheme {scheme}: the {layout.producer} layout of {shape.family} "
                         f"({layout.fmt}) is written as {' or '.join(layout.schemes)}")
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

    tensors = layout_tensors if shape.family in LAYOUTS else iter_tensors
    with torch.no_grad():
        for name, t in tensors(shape, scheme, seed, device):
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
    if shape.family in LAYOUTS and LAYOUTS[shape.family].fmt == "modelopt":
        qc = cfg["quantization_config"]  # ModelOpt writes its config here too (vLLM reads either)
        hf_quant = {"producer": qc["producer"], "quantization": {k: qc[k] for k in (
            "quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules")}}
        (out / "hf_quant_config.json").write_text(json.dumps(hf_quant, indent=2))
    tok.save(out)  # the harness' character tokenizer: ids below the vocabulary, no download
    return {"out": str(out), "shape": shape.name, "scheme": scheme, "seed": seed, "rng_device": device,
            "shards": len(names), "bytes": total, "params": shape.params}
