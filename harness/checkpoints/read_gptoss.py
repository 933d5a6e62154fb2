"""The gpt-oss MXFP4 layout (`*_blocks` / `*_scales`, quant_method "mxfp4"),
as transformers' mxfp4 integration reads it (make_gptoss.py lists it).

Rows of gate_up are interleaved (2j gate, 2j+1 up); the harness' w13 is gate
rows then up rows, so they are de-interleaved here, and gate_up_proj_bias
[E, 2I] (the same interleaved order) with them. Expert biases are read when
the checkpoint has them: both of a block or neither, in every MoE layer or in
none, float32 / bfloat16 / float16 of shape [E, 2I] and [E, H] (the blocks'
own E, 2I and H), every value finite; they load as float32 (exact) into the
layer's w13_bias / w2_bias. Whether the model's MoE block has biases is the
family's fact, checked where the layer is built
(harness/emulation/checkpoint_blocks.py): a missing or an extra bias is
refused there, naming the tensor.
"""
from __future__ import annotations

import re

import torch

from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.completeness import check_layers, expert_count
from harness.checkpoints.files import check_tensor
from harness.checkpoints.values import block_scales, finite_bias
from harness.moe import loaders

FORMAT = "gpt-oss"
SHARED_EXPERT = False  # the layout has fused routed experts only (load.read_shared)
_KEY = re.compile(r"^(?P<block>.+)\.experts\.(?P<proj>gate_up_proj|down_proj)_(?P<part>blocks|scales|bias)$")


def recognises(config: dict) -> bool:
    return (config.get("quantization_config") or {}).get("quant_method") == "mxfp4"


# What a gpt-oss checkpoint runs in production: MXFP4 weights, bf16 activations
# (W4A16: vLLM's triton_kernels path on Hopper and MI300). Its quantization_config
# (quant_method mxfp4) names no activation format: the activations are not quantized.
SCHEME = "w_mxfp4"


def scheme(files) -> str:
    return SCHEME


def groups(keys) -> dict:
    out: dict = {}
    for k in keys:
        m = _KEY.match(k)
        if m:
            out.setdefault(m.group("block"), {})[(m.group("proj"), m.group("part"))] = k
    return out


PARTS = tuple((proj, part) for proj in ("gate_up_proj", "down_proj") for part in ("blocks", "scales"))
# the loader key of each per-expert bias -> its tensor suffix (checkpoint_blocks names a missing one)
BIAS_SUFFIXES = {"w13_bias": "gate_up_proj_bias", "w2_bias": "down_proj_bias"}
BIAS_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def bias_tensor(block: str, key: str) -> str:
    return f"{block}.experts.{BIAS_SUFFIXES[key]}"


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
    _complete_biases(files, blocks)


def _complete_biases(files, blocks: dict) -> None:
    """Both biases of a block or neither; every MoE layer alike."""
    first = None
    for b in sorted(blocks):
        have = [proj for proj in ("gate_up_proj", "down_proj") if (proj, "bias") in blocks[b]]
        if len(have) == 1:
            other = "down_proj" if have[0] == "gate_up_proj" else "gate_up_proj"
            raise CheckpointFormatError(files.folder, f"{b}.experts.{other}_bias",
                                        f"this tensor ({b}.experts.{have[0]}_bias is present: gate_up_proj_bias "
                                        "and down_proj_bias come together), it is missing")
        if first is None:
            first = (b, bool(have))
        elif bool(have) != first[1]:
            with_, without = (b, first[0]) if have else (first[0], b)
            raise CheckpointFormatError(files.folder, f"{without}.experts.gate_up_proj_bias",
                                        f"expert biases in every MoE layer or in none ({with_} has them), "
                                        "it is missing")


def deinterleave(rows: torch.Tensor) -> torch.Tensor:
    """[E, 2I, ...] rows (gate, up, gate, up, ...) -> gate rows then up rows."""
    return torch.cat([rows[:, 0::2], rows[:, 1::2]], dim=1)


def block_tensors(files, block: str, names: dict, hscheme: str) -> dict:
    for proj in ("gate_up_proj", "down_proj"):
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
        if (proj, "bias") in names:
            out[f"{key}_bias"] = _bias(files, names[proj, "bias"], tuple(s.shape[:2]), interleaved=key == "w13")
    return out


def _bias(files, name: str, shape: tuple, interleaved: bool) -> torch.Tensor:
    """[E, N] float32 in the harness' row order (gate then up for gate_up)."""
    t = check_tensor(files, name, files.get(name), dtype=BIAS_DTYPES, shape=shape)
    t = finite_bias(files, name, t).to(torch.float32)
    return deinterleave(t) if interleaved else t


def quant_config(tensors: dict, hscheme: str):
    return loaders.load_ocp_mx(tensors, scheme=hscheme)
