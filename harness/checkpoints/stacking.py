"""Per-expert checkpoint tensors -> the stacked layout of harness.moe.loaders.

w13 is gate rows then up rows ([E, 2I, ...]), as vLLM's w13 and the harness'
MoE layer take it; w1/w3 (gate/up) per-expert scalars become [E, 2] so the
loader can check the pair agrees. Every tensor is fetched through `fetch`,
which checks dtype and shape against what the format says, naming the tensor.
"""
from __future__ import annotations

import torch

from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.files import CheckpointFiles, check_tensor


def fetch(files: CheckpointFiles, block: str, experts: dict, e: int, proj: str, suffix: str, *,
          dtype=None, shape=None, required=True):
    names = experts[e].get(proj, {})
    if suffix not in names:
        if not required:
            return None
        have = ", ".join(sorted(names)) or "nothing"
        raise CheckpointFormatError(files.folder, f"{block}.experts.{e}.{proj}*.{suffix}",
                                    f"this tensor (found {have} for this projection)")
    name = names[suffix]
    return check_tensor(files, name, files.get(name), dtype=dtype, shape=shape)


def expert_ids(files: CheckpointFiles, block: str, experts: dict) -> list[int]:
    ids = sorted(experts)
    if ids != list(range(len(ids))):
        raise CheckpointFormatError(files.folder, f"{block}.experts.*", f"experts 0..{len(ids) - 1}, got ids {ids[:8]}")
    return ids


PROJS = ("gate", "up", "down")


def collect(files: CheckpointFiles, block: str, experts: dict, per_expert) -> dict:
    """{(proj, key): [tensor of expert 0, 1, ...]} over gate, up and down:
    `per_expert(e, proj)` returns one expert projection's {key: tensor}, fetched
    (and checked) the way its format says."""
    got: dict = {}
    for proj in PROJS:
        for e in expert_ids(files, block, experts):
            for key, t in per_expert(e, proj).items():
                got.setdefault((proj, key), []).append(t)
    return got


def stacked(got: dict, blocks: dict, per_tensor: dict = None) -> dict:
    """The loader's tensors from `collect`'s lists. blocks: {key: (w13 name,
    w2 name)} of per-row tensors (weights, block scales): gate rows then up
    rows, and down stacked; per_tensor: {key: (w13 name, w2 name)} of
    per-expert scalars: [E, 2] (gate, up) and [E]."""
    out = {}
    for key, (w13, w2) in blocks.items():
        out[w13], out[w2] = cat_w13(got["gate", key], got["up", key]), stack(got["down", key])
    for key, (w13, w2) in (per_tensor or {}).items():
        out[w13], out[w2] = pair(got["gate", key], got["up", key]), scalars(got["down", key])
    return out


def cat_w13(gate: list, up: list) -> torch.Tensor:
    """[E, 2I, ...]: each expert's gate rows, then its up rows."""
    return torch.stack([torch.cat([g, u], dim=0) for g, u in zip(gate, up)])


def pair(gate: list, up: list) -> torch.Tensor:
    """[E, 2] per-expert (gate, up) scalars."""
    return torch.stack([torch.stack([g.reshape(()), u.reshape(())]) for g, u in zip(gate, up)])


def stack(values: list) -> torch.Tensor:
    return torch.stack([v.reshape(v.shape) for v in values])


def scalars(values: list) -> torch.Tensor:
    return torch.stack([v.reshape(()) for v in values])
