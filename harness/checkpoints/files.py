"""A checkpoint folder as the readers see it: config.json, the tensors of its
*.safetensors files (opened lazily: a real checkpoint is not read whole), and
the expert tensors grouped by MoE block, expert and projection.

Expert tensor names: `<block>.experts.<e>.<proj>.<suffix>` with proj
gate_proj/up_proj/down_proj (transformers Qwen/Mixtral-5) or w1/w3/w2
(Mixtral-4 files); `<block>` is the sparse-MoE module path the lm-eval swap
uses (e.g. model.layers.0.mlp).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from harness.checkpoints.errors import CheckpointFormatError

PROJ = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up", "w2": "down"}
_EXPERT = re.compile(r"^(?P<block>.+)\.experts\.(?P<e>\d+)\.(?P<proj>[A-Za-z0-9_]+)\.(?P<suffix>[A-Za-z0-9_]+)$")


class CheckpointFiles:
    def __init__(self, folder):
        from safetensors import safe_open

        self.folder = Path(folder)
        cfg = self.folder / "config.json"
        if not cfg.is_file():
            raise CheckpointFormatError(self.folder, "config.json", "a checkpoint folder with config.json")
        self.config = json.loads(cfg.read_text())
        files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise CheckpointFormatError(self.folder, "*.safetensors", "at least one safetensors file")
        self._where = {}
        self._handles = {}
        for f in files:
            h = safe_open(str(f), framework="pt")
            self._handles[f] = h
            for k in h.keys():
                self._where[k] = f

    def keys(self):
        return self._where.keys()

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def get(self, name: str):
        if name not in self._where:
            raise CheckpointFormatError(self.folder, name, "this tensor in the checkpoint (it is missing)")
        return self._handles[self._where[name]].get_tensor(name)

    def optional(self, name: str):
        return self.get(name) if name in self._where else None

    def json(self, name: str):
        p = self.folder / name
        return json.loads(p.read_text()) if p.is_file() else None


def module_path(block: str) -> str:
    """The sparse-MoE module path as transformers 5 loads it: Mixtral files name
    the block `block_sparse_moe`, the loaded model `mlp` (its conversion mapping)."""
    return block.replace(".block_sparse_moe", ".mlp")


def expert_groups(keys) -> dict:
    """{block module path: {expert id: {"gate"|"up"|"down": {suffix: tensor name}}}}."""
    out: dict = {}
    for k in keys:
        m = _EXPERT.match(k)
        if not m or m.group("proj") not in PROJ:
            continue
        out.setdefault(module_path(m.group("block")), {}).setdefault(int(m.group("e")), {}) \
            .setdefault(PROJ[m.group("proj")], {})[m.group("suffix")] = k
    return out


def check_tensor(files: CheckpointFiles, name: str, t, *, dtype=None, shape=None):
    """CheckpointFormatError naming the tensor unless dtype / shape match."""
    import torch

    if dtype is not None:
        allowed = dtype if isinstance(dtype, tuple) else (dtype,)
        if t.dtype not in allowed:
            raise CheckpointFormatError(files.file_of(name), name,
                                        f"dtype {' or '.join(str(d) for d in allowed)}, got {t.dtype}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise CheckpointFormatError(files.file_of(name), name, f"shape {tuple(shape)}, got {tuple(t.shape)}")
    return t if isinstance(t, torch.Tensor) else t
