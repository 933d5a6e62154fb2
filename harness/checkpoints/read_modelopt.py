"""ModelOpt NVFP4 checkpoints (`export_hf_checkpoint`).

Per expert projection, as ModelOpt writes them:
  weight          uint8 [N, K/2], two e2m1 codes per byte, low nibble first
  weight_scale    float8_e4m3fn [N, K/16]
  weight_scale_2  float32 [], DECODE side (amax / 2688)
  input_scale     float32 [], DECODE side
The recognised config: quantization_config {"quant_method": "modelopt",
"quant_algo": "NVFP4", group_size 16} (also in hf_quant_config.json).
"""
from __future__ import annotations

import torch

from harness.schemes import NVFP4

from harness.checkpoints.completeness import check_experts
from harness.checkpoints.errors import CheckpointFormatError, expect_object
from harness.checkpoints.files import expert_groups
from harness.checkpoints.stacking import collect, e4m3_scales, fetch, positive, stacked
from harness.moe import loaders

FORMAT = "modelopt"
BIAS_SUFFIXES: dict = {}  # per-expert biases: this format stores none (read_gptoss has them)
SHARED_EXPERT = True  # a dense shared MLP is stored like an expert's projections (load.read_shared)


def recognises(config: dict) -> bool:
    return (config.get("quantization_config") or {}).get("quant_method") == "modelopt"


def scheme(files) -> str:
    qc = files.config["quantization_config"]
    where = files.folder / "config.json"
    if qc.get("quant_algo") != "NVFP4":
        raise CheckpointFormatError(where, "quantization_config.quant_algo", f"'NVFP4', got {qc.get('quant_algo')!r}")
    groups = expect_object(where, "quantization_config.config_groups", qc.get("config_groups"), optional=True)
    for gname, g in groups.items():
        g = expect_object(where, f"quantization_config.config_groups.{gname}", g)
        for part in ("weights", "input_activations"):
            a = expect_object(where, f"quantization_config.config_groups.{gname}.{part}", g.get(part), optional=True)
            if a.get("group_size") != 16 or a.get("num_bits") != 4 or a.get("type") != "float":
                raise CheckpointFormatError(where, f"quantization_config.config_groups.{gname}.{part}",
                                            f"num_bits 4, type float, group_size 16 (NVFP4), got {a}")
    return NVFP4.name  # ModelOpt's NVFP4 export is the two-level scheme


PARTS = ("weight", "weight_scale", "weight_scale_2", "input_scale")


def groups(keys) -> dict:
    return expert_groups(keys)


def complete(files, blocks: dict, hscheme: str) -> None:
    check_experts(files.folder, files.config, blocks, parts(hscheme))


def parts(hscheme: str) -> tuple:
    """The tensors each expert projection stores (completeness.py)."""
    return PARTS


def block_tensors(files, block: str, experts: dict, hscheme: str) -> dict:
    def one(e, proj):
        w = fetch(files, block, experts, e, proj, "weight", dtype=torch.uint8)
        if w.dim() != 2:
            name = experts[e][proj]["weight"]
            raise CheckpointFormatError(files.file_of(name), name, f"a 2-D [N, K/2] packed weight, got {tuple(w.shape)}")
        n, k2 = w.shape
        return {"weight": w,
                "weight_scale": fetch(files, block, experts, e, proj, "weight_scale", dtype=torch.float8_e4m3fn,
                                      shape=(n, k2 // 8), check=e4m3_scales),
                "weight_scale_2": fetch(files, block, experts, e, proj, "weight_scale_2", dtype=torch.float32, shape=(),
                                        check=positive),
                "input_scale": fetch(files, block, experts, e, proj, "input_scale", dtype=torch.float32, shape=(),
                                     check=positive)}

    return stacked(collect(files, block, experts, one),
                   {"weight": ("w13_weight", "w2_weight"), "weight_scale": ("w13_weight_scale", "w2_weight_scale")},
                   {"weight_scale_2": ("w13_weight_scale_2", "w2_weight_scale_2"),
                    "input_scale": ("w13_input_scale", "w2_input_scale")},
                   shared=("weight_scale_2",))


def quant_config(tensors: dict, hscheme: str):
    return loaders.load_modelopt_nvfp4(tensors)
