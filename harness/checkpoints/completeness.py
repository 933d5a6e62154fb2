"""Completeness of a checkpoint's experts against its config.json, checked
from the tensor names alone before any tensor is read: every MoE layer the
config declares has experts 0..E-1, each with gate, up and down, each with
every part its format stores (the reader's `parts(scheme)`); no block, expert
or projection beyond them. The first gap is one CheckpointFormatError naming
the tensor and the config field it was counted from.

Which layers are sparse reads the config's own keys (the rows below), not the
model type: Qwen-MoE `mlp_only_layers` / `decoder_sparse_step`, DeepSeek
`first_k_dense_replace` / `moe_layer_freq`, Llama-4 `moe_layers`; a config with none of them has
experts in every layer (Mixtral, gpt-oss)."""
from __future__ import annotations

import re

from harness.checkpoints.errors import CheckpointFormatError

# config keys holding the routed expert count, first present wins (all present must agree)
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
PROJS = ("gate", "up", "down")
# canonical projection name in a tensor name, when the checkpoint holds none of that projection
PROJ_NAME = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}


def _int(config: dict, where, key: str, low: int = 1) -> int:
    v = config.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise CheckpointFormatError(where, key, f"an integer >= {low}, got {v!r}")
    return v


def expert_count(config: dict, where) -> tuple[int, str]:
    """(E, the key it was read from)."""
    found = [(k, config[k]) for k in EXPERT_COUNT_KEYS if config.get(k) is not None]
    if not found:
        raise CheckpointFormatError(where, " / ".join(EXPERT_COUNT_KEYS), "the routed expert count (none is set)")
    for k, _ in found:
        _int(config, where, k)
    if len({v for _, v in found}) > 1:
        raise CheckpointFormatError(where, found[1][0], f"{found[0][1]} as {found[0][0]} says, got {found[1][1]}")
    return found[0][1], found[0][0]


def sparse_layers(config: dict, where) -> tuple[list[int], str]:
    """(indices of the MoE layers, how they were counted)."""
    n = _int(config, where, "num_hidden_layers")
    if "mlp_only_layers" in config or "decoder_sparse_step" in config:
        dense = config.get("mlp_only_layers") or []
        if not isinstance(dense, list) or not all(isinstance(i, int) for i in dense):
            raise CheckpointFormatError(where, "mlp_only_layers", f"a list of layer indices, got {dense!r}")
        step = _int(config, where, "decoder_sparse_step") if "decoder_sparse_step" in config else 1
        return ([i for i in range(n) if i not in dense and (i + 1) % step == 0],
                f"num_hidden_layers {n}, mlp_only_layers {dense}, decoder_sparse_step {step}")
    if "first_k_dense_replace" in config:
        k = _int(config, where, "first_k_dense_replace", low=0)
        freq = _int(config, where, "moe_layer_freq") if "moe_layer_freq" in config else 1
        return ([i for i in range(n) if i >= k and i % freq == 0],
                f"num_hidden_layers {n}, first_k_dense_replace {k}, moe_layer_freq {freq}")
    if "moe_layers" in config:  # Llama-4 text (transformers writes the list it derived)
        moe = config["moe_layers"]
        if not isinstance(moe, list) or not all(isinstance(i, int) and 0 <= i < n for i in moe):
            raise CheckpointFormatError(where, "moe_layers", f"a list of layer indices below {n}, got {moe!r}")
        return sorted(set(moe)), f"num_hidden_layers {n}, moe_layers {moe}"
    return list(range(n)), f"num_hidden_layers {n}, every layer sparse"


def layer_of(block: str):
    m = LAYER.search(block + ".")
    return int(m.group(1)) if m else None


def check_layers(folder, config: dict, blocks) -> int:
    """Every sparse layer has one expert block and no other block exists; returns E."""
    where = folder / "config.json"
    layers, how = sparse_layers(config, where)
    E, _ = expert_count(config, where)
    by_layer: dict = {}
    for b in sorted(blocks):
        i = layer_of(b)
        if i is None or i not in layers:
            raise CheckpointFormatError(folder, f"{b}.experts", f"experts only in the MoE layers of config.json ({how}), "
                                        f"this block is not one")
        if i in by_layer:
            raise CheckpointFormatError(folder, f"{b}.experts", f"one expert block per layer, {by_layer[i]} is layer {i} too")
        by_layer[i] = b
    for i in layers:
        if i not in by_layer:
            raise CheckpointFormatError(folder, f"model.layers.{i}.mlp.experts",
                                        f"quantized experts in layer {i} (config.json {how}), found none")
    return E


def check_experts(folder, config: dict, blocks: dict, parts: tuple) -> None:
    """blocks: {block: {expert id: {proj: {suffix: tensor name}}}} (files.expert_groups)."""
    E = check_layers(folder, config, blocks)
    _, key = expert_count(config, folder / "config.json")
    for b in sorted(blocks):
        experts = blocks[b]
        extra = sorted(e for e in experts if e >= E)
        if extra:
            raise CheckpointFormatError(folder, f"{b}.experts.{extra[0]}",
                                        f"{E} experts (config.json {key} {E}), found expert {extra[0]}")
        for e in range(E):
            if e not in experts:
                raise CheckpointFormatError(folder, f"{b}.experts.{e}",
                                            f"{E} experts (config.json {key} {E}), expert {e} has no tensors")
            for proj in PROJS:
                names = experts[e].get(proj, {})
                for part in parts:
                    if part not in names:
                        prefix = (next(iter(names.values())).rsplit(".", 1)[0] if names
                                  else f"{b}.experts.{e}.{PROJ_NAME[proj]}")
                        raise CheckpointFormatError(folder, f"{prefix}.{part}",
                                                    f"this tensor ({E} experts x gate, up, down x "
                                                    f"{', '.join(parts)}), it is missing")
