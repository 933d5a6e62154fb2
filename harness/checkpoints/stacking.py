"""Per-expert checkpoint tensors -> the stacked layout of harness.moe.loaders.

w13 is gate rows then up rows ([E, 2I, ...]), as vLLM's w13 and the harness'
MoE layer take it; w1/w3 (gate/up) per-expert scalars become [E, 2] so the
loader can check the pair agrees. Every tensor is fetched through `fetch`,
which checks dtype and shape against what the format says, naming the tensor.
"""
from __future__ import annotations

import torch

from .errors import CheckpointFormatError
from .files import CheckpointFiles, check_tensor


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
