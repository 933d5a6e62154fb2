"""compressed-tensors checkpoints (llmcompressor): NVFP4 ("nvfp4-pack-quantized")
and MXFP4 ("mxfp4-pack-quantized").

Per expert projection, as compressed-tensors writes them:
  weight_packed        uint8 [N, K/2], two e2m1 codes per byte, low nibble first
  weight_scale         nvfp4: float8_e4m3fn [N, K/16]; mxfp4: uint8 E8M0 [N, K/32]
  weight_global_scale  nvfp4: float32 [1], ENCODE side (2688 / amax)
  input_global_scale   nvfp4: float32 [1], ENCODE side, static (dynamic "local" block scales)
MXFP4 activations are dynamic (no tensor). The harness takes one activation
global scale per layer input: the minimum encode-side scale (= 1 / the
largest decode-side), as vLLM does.
"""
from __future__ import annotations

import torch

import harness.formats as hf
from harness.schemes import get_scheme

from harness.checkpoints.completeness import check_experts
from harness.checkpoints.errors import CheckpointFormatError, expect_object
from harness.checkpoints.files import expert_groups
from harness.checkpoints.stacking import collect, e4m3_scales, e8m0_scales, fetch, positive, stacked
from harness.moe import loaders

FORMAT = "compressed-tensors"
BIAS_SUFFIXES: dict = {}  # per-expert biases: this format stores none (read_gptoss has them)
SHARED_EXPERT = True  # a dense shared MLP is stored like an expert's projections (load.read_shared)
# compressed-tensors "format" -> (harness weight format, harness scheme, block size, scale dtype name)
_FORMATS = {"nvfp4-pack-quantized": ("nvfp4", "nvfp4", 16, "torch.float8_e4m3fn"),
            "mxfp4-pack-quantized": ("mxfp4", "w_mxfp4_a_mxfp4", 32, "torch.uint8")}


def recognises(config: dict) -> bool:
    return (config.get("quantization_config") or {}).get("quant_method") == "compressed-tensors"


def _fail(files, field, expected):
    raise CheckpointFormatError(files.folder / "config.json", f"quantization_config.{field}", expected)


def scheme(files) -> str:
    qc = files.config["quantization_config"]
    where = files.folder / "config.json"
    fmt = qc.get("format")
    if not isinstance(fmt, str) or fmt not in _FORMATS:
        _fail(files, "format", f"one of {', '.join(_FORMATS)}, got {fmt!r}")
    wfmt, hscheme, block, sdt = _FORMATS[fmt]
    groups = expect_object(where, "quantization_config.config_groups", qc.get("config_groups"), optional=True)
    if len(groups) != 1:
        _fail(files, "config_groups", f"exactly one group, got {len(groups)}")
    (gname, g), = groups.items()
    g = expect_object(where, f"quantization_config.config_groups.{gname}", g)
    w = expect_object(where, f"quantization_config.config_groups.{gname}.weights", g.get("weights"), optional=True)
    a = g.get("input_activations")
    if a:
        a = expect_object(where, f"quantization_config.config_groups.{gname}.input_activations", a)
    want_w = {"num_bits": 4, "type": "float", "group_size": block, "scale_dtype": sdt,
              "strategy": "tensor_group" if hf.get_format(wfmt).has_global_scale else "group"}
    for k, v in want_w.items():
        if w.get(k) != v:
            _fail(files, f"config_groups.{gname}.weights.{k}", f"{v!r} for {fmt}, got {w.get(k)!r}")
    if not a:
        _fail(files, f"config_groups.{gname}.input_activations",
              f"activation quantization ({fmt} weight-only has no harness MoE scheme)")
    want_a = {"num_bits": 4, "type": "float", "group_size": block,
              "dynamic": "local" if hf.get_format(wfmt).has_global_scale else True}
    for k, v in want_a.items():
        if a.get(k) != v:
            _fail(files, f"config_groups.{gname}.input_activations.{k}", f"{v!r} for {fmt}, got {a.get(k)!r}")
    return hscheme


def groups(keys) -> dict:
    return expert_groups(keys)


def complete(files, blocks: dict, hscheme: str) -> None:
    check_experts(files.folder, files.config, blocks, parts(hscheme))


def parts(hscheme: str) -> tuple:
    """The tensors each expert projection stores (completeness.py)."""
    if get_scheme(hscheme).two_level:
        return ("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale")
    return ("weight_packed", "weight_scale")


def block_tensors(files, block: str, experts: dict, hscheme: str) -> dict:
    row = get_scheme(hscheme)
    nvfp4 = row.two_level  # a per-tensor global scale beside the block scales
    blk = row.weight_spec.block_size
    sdt = torch.float8_e4m3fn if nvfp4 else torch.uint8

    def one(e, proj):
        w = fetch(files, block, experts, e, proj, "weight_packed", dtype=torch.uint8)
        n, k2 = _rows(files, experts, e, proj, w)
        t = {"weight_packed": w,
             "weight_scale": fetch(files, block, experts, e, proj, "weight_scale", dtype=sdt,
                                   shape=(n, 2 * k2 // blk), check=e4m3_scales if nvfp4 else e8m0_scales)}
        if nvfp4:
            for suffix in ("weight_global_scale", "input_global_scale"):
                t[suffix] = fetch(files, block, experts, e, proj, suffix, dtype=torch.float32, shape=(1,),
                                  check=positive)
        return t

    per_tensor = {"weight_global_scale": ("w13_weight_global_scale", "w2_weight_global_scale"),
                  "input_global_scale": ("w13_input_global_scale", "w2_input_global_scale")} if nvfp4 else None
    return stacked(collect(files, block, experts, one),
                   {"weight_packed": ("w13_weight_packed", "w2_weight_packed"),
                    "weight_scale": ("w13_weight_scale", "w2_weight_scale")},
                   per_tensor, shared=("weight_global_scale",) if nvfp4 else ())


def _rows(files, experts, e, proj, w):
    """(N, K/2) of a packed weight; one line naming it unless it is 2-D."""
    if w.dim() != 2:
        name = experts[e][proj]["weight_packed"]
        raise CheckpointFormatError(files.file_of(name), name, f"a 2-D [N, K/2] packed weight, got shape {tuple(w.shape)}")
    return w.shape


def quant_config(tensors: dict, hscheme: str):
    if get_scheme(hscheme).two_level:
        return loaders.load_compressed_tensors_nvfp4(tensors)
    return loaders.load_ocp_mx({"w13_weight": tensors["w13_weight_packed"], "w13_weight_scale": tensors["w13_weight_scale"],
                                "w2_weight": tensors["w2_weight_packed"], "w2_weight_scale": tensors["w2_weight_scale"]},
                               scheme=hscheme)
