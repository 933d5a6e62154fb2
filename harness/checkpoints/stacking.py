"""Per-expert checkpoint tensors -> the stacked layout of harness.moe.loaders.

w13 is gate rows then up rows ([E, 2I, ...]), as vLLM's w13 and the harness'
MoE layer take it; w1/w3 (gate/up) per-expert scalars become [E, 2] so the
loader can check the pair agrees. Every tensor is fetched through `fetch`,
which checks dtype and shape against what the format says and its values
(`check`, values.py), naming the tensor; before stacking, every expert's
tensor must have the shape the others have, named when it does not.
"""
from __future__ import annotations

from collections import Counter

import torch

from harness.checkpoints import values
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.files import CheckpointFiles, check_tensor


def fetch(files: CheckpointFiles, block: str, experts: dict, e: int, proj: str, suffix: str, *,
          dtype=None, shape=None, required=True, check=None):
    """One tensor, its dtype / shape checked; check(files, name, tensor) checks its values."""
    names = experts[e].get(proj, {})
    if suffix not in names:
        if not required:
            return None
        have = ", ".join(sorted(names)) or "nothing"
        raise CheckpointFormatError(files.folder, f"{block}.experts.{e}.{proj}*.{suffix}",
                                    f"this tensor (found {have} for this projection)")
    name = names[suffix]
    t = check_tensor(files, name, files.get(name), dtype=dtype, shape=shape)
    return check(files, name, t) if check is not None else t


def e4m3_scales(files, name, t):
    return values.block_scales(files, name, t, "e4m3")


def e8m0_scales(files, name, t):
    return values.block_scales(files, name, t, "e8m0")


positive = values.per_tensor_scale


def expert_ids(files: CheckpointFiles, block: str, experts: dict) -> list[int]:
    ids = sorted(experts)
    if ids != list(range(len(ids))):
        raise CheckpointFormatError(files.folder, f"{block}.experts.*", f"experts 0..{len(ids) - 1}, got ids {ids[:8]}")
    return ids


PROJS = ("gate", "up", "down")


class Collected(dict):
    """{(proj, key): [tensor of expert 0, 1, ...]} plus `names` {(proj, key): [tensor name, ...]}."""

    def __init__(self, files):
        super().__init__()
        self.files = files
        self.names: dict = {}


def collect(files: CheckpointFiles, block: str, experts: dict, per_expert) -> Collected:
    """{(proj, suffix): [tensor of expert 0, 1, ...]} over gate, up and down:
    `per_expert(e, proj)` returns one expert projection's {suffix: tensor}
    (keyed by the file's tensor suffix, so a problem names the tensor), fetched
    (and checked) the way its format says."""
    got = Collected(files)
    for proj in PROJS:
        for e in expert_ids(files, block, experts):
            for key, t in per_expert(e, proj).items():
                got.setdefault((proj, key), []).append(t)
                got.names.setdefault((proj, key), []).append(
                    experts[e].get(proj, {}).get(key, f"{block}.experts.{e}.{proj}.{key}"))
    return got


def same_shapes(got: Collected, key) -> None:
    """Every expert's tensor `key` has the shape most experts have."""
    ts, ns = got[key], got.names[key]
    common, _ = Counter(tuple(t.shape) for t in ts).most_common(1)[0]
    for t, n in zip(ts, ns):
        if tuple(t.shape) != common:
            raise CheckpointFormatError(got.files.file_of(n), n,
                                        f"shape {common} as the other experts' {key[0]} tensors, got {tuple(t.shape)}")


def stacked(got: Collected, blocks: dict, per_tensor: dict = None, shared: tuple = ()) -> dict:
    """The loader's tensors from `collect`'s lists. blocks: {key: (w13 name,
    w2 name)} of per-row tensors (weights, block scales): gate rows then up
    rows, and down stacked; per_tensor: {key: (w13 name, w2 name)} of
    per-expert scalars: [E, 2] (gate, up) and [E]; `shared`: per_tensor keys
    whose gate and up values must be equal (one w13 weight global scale)."""
    for (proj, key) in got:
        same_shapes(got, (proj, key))
    for key in blocks:
        g, u = got["gate", key][0], got["up", key][0]
        if tuple(g.shape[1:]) != tuple(u.shape[1:]):
            n = got.names["up", key][0]
            raise CheckpointFormatError(got.files.file_of(n), n, f"shape [*, {', '.join(map(str, g.shape[1:]))}] as the "
                                        f"gate projection's, got {tuple(u.shape)}")
    for key in shared:
        for gn, un, g, u in zip(got.names["gate", key], got.names["up", key], got["gate", key], got["up", key]):
            values.same_pair(got.files, gn, un, g, u)
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
