"""The gpt-oss MXFP4 layout (`*_blocks` / `*_scales`, quant_method "mxfp4"),
as transformers' mxfp4 integration reads it (make_gptoss.py lists it).

Rows of gate_up are interleaved (2j gate, 2j+1 up); the harness' w13 is gate
rows then up rows, so they are de-interleaved here. Expert biases and
gpt-oss' clamped SwiGLU are not what the harness MoE layer computes
(silu_and_mul, no bias): such checkpoints are refused, not approximated.
"""
from __future__ import annotations

import re

import torch

from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.completeness import check_layers, expert_count
from harness.checkpoints.files import check_tensor
from harness.checkpoints.values import block_scales
from harness.moe import loaders

FORMAT = "gpt-oss"
_KEY = re.compile(r"^(?P<block>.+)\.experts\.(?P<proj>gate_up_proj|down_proj)_(?P<part>blocks|scales|bias)$")


def recognises(config: dict) -> bool:
    return (config.get("quantization_config") or {}).get("quant_method") == "mxfp4"


def scheme(files) -> str:
    if files.config.get("model_type") == "gpt_oss":
        raise CheckpointFormatError(files.folder / "config.json", "model_type",
                                    "a silu_and_mul MoE without expert biases (gpt_oss' clamped SwiGLU and biases "
                                    "are not emulated by the harness MoE layer)")
    return "w_mxfp4_a_mxfp4"


def groups(keys) -> dict:
    out: dict = {}
    for k in keys:
        m = _KEY.match(k)
        if m:
            out.setdefault(m.group("block"), {})[(m.group("proj"), m.group("part"))] = k
    return out


PARTS = tuple((proj, part) for proj in ("gate_up_proj", "down_proj") for part in ("blocks", "scales"))


def complete(files, blocks: dict, hscheme: str) -> None:
    """Every MoE layer has its four tensors, each holding config.json's expert count in dim 0."""
    E = check_layers(files.folder, files.config, blocks)
    _, key = expert_count(files.config, files.folder / "config.json")
    for b in sorted(blocks):
        for proj, part in PARTS:
            if (proj, part) not in blocks[b]:
                raise CheckpointFormatError(files.folder, f"{b}.experts.{proj}_{part}", "this tensor (missing)")
            name = blocks[b][proj, part]
            shape = files.header(name)[1]
            if not shape or shape[0] != E:
                raise CheckpointFormatError(files.file_of(name), name,
                                            f"{E} experts in dim 0 (config.json {key} {E}), got shape {shape}")


def deinterleave(rows: torch.Tensor) -> torch.Tensor:
    """[E, 2I, ...] rows (gate, up, gate, up, ...) -> gate rows then up rows."""
    return torch.cat([rows[:, 0::2], rows[:, 1::2]], dim=1)


def block_tensors(files, block: str, names: dict, hscheme: str) -> dict:
    for proj in ("gate_up_proj", "down_proj"):
        if (proj, "bias") in names:
            raise CheckpointFormatError(files.file_of(names[proj, "bias"]), names[proj, "bias"],
                                        "no expert bias (the harness MoE layer has none)")
        for part in ("blocks", "scales"):
            if (proj, part) not in names:
                raise CheckpointFormatError(files.folder, f"{block}.experts.{proj}_{part}", "this tensor (missing)")
    out = {}
    E, key_e = expert_count(files.config, files.folder / "config.json")
    for proj, key in (("gate_up_proj", "w13"), ("down_proj", "w2")):
        bname, sname = names[proj, "blocks"], names[proj, "scales"]
        s = check_tensor(files, sname, files.get(sname), dtype=torch.uint8)
        if s.dim() != 3:
            raise CheckpointFormatError(files.file_of(sname), sname, f"[E, N, K/32] E8M0 bytes, got shape {tuple(s.shape)}")
        if s.shape[0] != E:
            raise CheckpointFormatError(files.file_of(sname), sname,
                                        f"{E} experts in dim 0 (config.json {key_e} {E}), got shape {tuple(s.shape)}")
        block_scales(files, sname, s, "e8m0", per_expert=True)
        b = check_tensor(files, bname, files.get(bname), dtype=torch.uint8, shape=(*s.shape, 16))
        w = b.reshape(s.shape[0], s.shape[1], -1)
        if key == "w13":
            if s.shape[1] % 2:
                raise CheckpointFormatError(files.file_of(bname), bname, f"an even number of gate_up rows, got {s.shape[1]}")
            w, s = deinterleave(w), deinterleave(s)
        out[f"{key}_weight"], out[f"{key}_weight_scale"] = w, s
    return out


def quant_config(tensors: dict, hscheme: str):
    return loaders.load_ocp_mx(tensors, scheme=hscheme)
