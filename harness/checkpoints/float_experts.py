"""The float expert tensors of an unquantized transformers checkpoint (the
model a maker quantizes), in one canonical form per sparse-MoE block:
gate, up [E, I, H], down [E, H, I] and, where the model has them, the
per-expert biases gate_bias, up_bias [E, I] and down_bias [E, H].

Two source layouts, as transformers 5.24 writes them:

- per expert: `<block>.experts.<e>.<gate_proj|up_proj|down_proj>.weight`
  [N, K] (Qwen-MoE, Mixtral, DeepSeek-V3; files.py names them);
- fused, one row of `FUSED` per config `model_type` (the family's own
  layout, read from the installed transformers' modeling source and kept
  equal to harness/emulation/families.py by suites/checkpoints):
  gpt_oss `<block>.experts.gate_up_proj` [E, H, 2I] with gate and up
  INTERLEAVED along 2I (gate = columns 0, 2, 4, ...), `down_proj` [E, I, H],
  `gate_up_proj_bias` [E, 2I] in the same interleaved order,
  `down_proj_bias` [E, H]; llama4_text `<block>.experts.gate_up_proj`
  [E, H, 2I] with gate then up along 2I (its forward chunks it in two),
  `down_proj` [E, I, H], no biases.

Anything else under `.experts.` is a ValueError naming the tensor: a maker
never quantizes experts it cannot place.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from harness.checkpoints.files import PROJ, _EXPERT, module_path


@dataclass(frozen=True)
class FusedLayout:
    gate_up: str              # experts attribute [E, H, 2I] (transposed) or [E, 2I, H]
    down: str                 # [E, I, H] (transposed) or [E, H, I]
    transposed: bool
    interleaved: bool         # gate/up alternate along 2I
    gate_up_bias: str | None = None   # [E, 2I], the gate_up order
    down_bias: str | None = None      # [E, H]
    router: str = "router"    # the block's router module (kept float by the makers)


FUSED = {
    "gpt_oss": FusedLayout("gate_up_proj", "down_proj", transposed=True, interleaved=True,
                           gate_up_bias="gate_up_proj_bias", down_bias="down_proj_bias"),
    "llama4_text": FusedLayout("gate_up_proj", "down_proj", transposed=True, interleaved=False),
}


@dataclass
class FloatExperts:
    gate: torch.Tensor                    # [E, I, H]
    up: torch.Tensor                      # [E, I, H]
    down: torch.Tensor                    # [E, H, I]
    gate_bias: torch.Tensor | None = None  # [E, I]
    up_bias: torch.Tensor | None = None    # [E, I]
    down_bias: torch.Tensor | None = None  # [E, H]
    names: tuple = ()                     # the source tensor names these came from

    @property
    def has_bias(self) -> bool:
        return self.down_bias is not None


def split_gate_up(t: torch.Tensor, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """[E, 2I, ...] -> (gate [E, I, ...], up [E, I, ...])."""
    if interleaved:
        return t[:, 0::2], t[:, 1::2]
    half = t.shape[1] // 2
    return t[:, :half], t[:, half:]


def _fused(tensors: dict, config: dict, where) -> dict:
    row = FUSED.get(config.get("model_type"))
    suffixes = {}
    if row is not None:
        suffixes = {row.gate_up: "gate_up", row.down: "down"}
        if row.gate_up_bias:
            suffixes[row.gate_up_bias] = "gate_up_bias"
        if row.down_bias:
            suffixes[row.down_bias] = "down_bias"
    found: dict = {}
    for k, v in tensors.items():
        if ".experts." not in k or _EXPERT.match(k):
            continue
        block, _, suffix = k.rpartition(".experts.")
        if suffix not in suffixes:
            raise ValueError(f"{where}: {k}: not an expert tensor of a known layout (per-expert "
                             f"<block>.experts.<e>.<proj>.weight, or the fused layout of model_type "
                             f"{', '.join(FUSED)})")
        found.setdefault(block, {})[suffixes[suffix]] = (k, v)
    out = {}
    for block, parts in found.items():
        for need in suffixes.values():
            if need not in parts:
                raise ValueError(f"{where}: {block}.experts: the {config.get('model_type')} layout has "
                                 f"{', '.join(suffixes)}; {need} is missing")
        gu, dn = parts["gate_up"][1], parts["down"][1]
        if row.transposed:
            gu, dn = gu.transpose(1, 2), dn.transpose(1, 2)
        gate, up = split_gate_up(gu, row.interleaved)
        fe = FloatExperts(gate.contiguous(), up.contiguous(), dn.contiguous(),
                          names=tuple(parts[p][0] for p in sorted(parts)))
        if "gate_up_bias" in parts:
            gb, ub = split_gate_up(parts["gate_up_bias"][1], row.interleaved)
            fe.gate_bias, fe.up_bias, fe.down_bias = gb.contiguous(), ub.contiguous(), parts["down_bias"][1]
        E, I, H = fe.gate.shape
        shapes = [(fe.down, (E, H, I))]
        if fe.has_bias:
            shapes += [(fe.gate_bias, (E, I)), (fe.down_bias, (E, H))]
        for t, want in shapes:
            if tuple(t.shape) != want:
                raise ValueError(f"{where}: {block}.experts: shapes {[tuple(p[1].shape) for p in parts.values()]} "
                                 f"are not the {config.get('model_type')} layout")
        out[module_path(block)] = fe
    return out


def _per_expert(tensors: dict, where) -> dict:
    per: dict = {}
    for k, v in tensors.items():
        m = _EXPERT.match(k)
        if not m:
            continue
        if m.group("proj") not in PROJ or m.group("suffix") != "weight":
            raise ValueError(f"{where}: {k}: not a float expert weight (gate_proj, up_proj, down_proj .weight)")
        per.setdefault(module_path(m.group("block")), {}).setdefault(int(m.group("e")), {})[PROJ[m.group("proj")]] = (k, v)
    out = {}
    for block, experts in per.items():
        ids = sorted(experts)
        if ids != list(range(len(ids))) or any(len(experts[e]) != 3 for e in ids):
            raise ValueError(f"{where}: {block}.experts: experts 0..{len(ids) - 1} each with gate, up and down")
        stack = {p: torch.stack([experts[e][p][1] for e in ids]) for p in ("gate", "up", "down")}
        out[block] = FloatExperts(stack["gate"], stack["up"], stack["down"],
                                  names=tuple(experts[e][p][0] for e in ids for p in ("gate", "up", "down")))
    return out


def read(tensors: dict, config: dict, where="model.safetensors") -> dict:
    """{block module path: FloatExperts} of a float checkpoint's tensors."""
    out = _per_expert(tensors, where)
    fused = _fused(tensors, config, where)
    both = sorted(set(out) & set(fused))
    if both:
        raise ValueError(f"{where}: {both[0]}.experts: per-expert and fused expert tensors in one block")
    out.update(fused)
    return out


def read_folder(folder) -> tuple[dict, dict, dict]:
    """(all tensors, config, {block: FloatExperts}) of a one-file float checkpoint folder."""
    import json

    from safetensors.torch import load_file

    folder = Path(folder)
    tensors = load_file(str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    return tensors, config, read(tensors, config, folder / "model.safetensors")

