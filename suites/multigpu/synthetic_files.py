"""What the tests of synthetic checkpoints share: every tensor of a written
folder, read through its index."""
from __future__ import annotations

import json

from safetensors import safe_open


def all_tensors(folder) -> dict:
    """{name: tensor} of every shard the folder's index names."""
    idx = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for f in sorted(set(idx.values())):
        with safe_open(str(folder / f), framework="pt") as fh:
            out.update({k: fh.get_tensor(k) for k in fh.keys()})
    return out
