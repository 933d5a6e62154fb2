"""Value checks of scale tensors, on the host as they are read and before
any capture: a NaN or negative block scale or a zero, negative or
non-finite per-tensor scale would otherwise flow into the emulation (and
into both sides of the round-trip proof alike). A refusal is one line naming
the file, the tensor, its expert and projection, and the first bad value.

  E4M3 block scales (NVFP4)  sign bit clear and not the NaN code (0x7F)
  E8M0 block scales (MX)     not 0xFF (NaN)
  per-tensor scales          finite and > 0 (global, weight_scale_2, input scales)
  expert biases (gpt-oss)    finite
"""
from __future__ import annotations

import torch

from harness.formats.spec import E4M3, E8M0_NAN

from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.files import _EXPERT


def _whose(name: str, expert=None) -> str:
    m = _EXPERT.match(name)
    if m:
        return f"expert {m.group('e')}, {m.group('proj')}"
    return f"expert {expert}" if expert is not None else "its expert"


def _where(bad: torch.Tensor, per_expert: bool) -> tuple:
    idx = [int(i) for i in torch.nonzero(bad)[0]]
    if per_expert:
        return idx[0], f"row {idx[1]}, block {idx[2]}" if len(idx) == 3 else f"index {idx[1:]}"
    return None, (f"row {idx[0]}, block {idx[1]}" if len(idx) == 2 else f"index {idx}")


def block_scales(files, name: str, t: torch.Tensor, kind: str, per_expert: bool = False) -> torch.Tensor:
    """kind "e4m3" or "e8m0"; per_expert: dim 0 of t is the expert (gpt-oss)."""
    b = t.view(torch.uint8)
    checks = ([("NaN", (b & 0x7F) == E4M3.nan_code), ("negative", (b & 0x80) != 0)] if kind == "e4m3"
              else [("NaN", b == E8M0_NAN)])
    for what, bad in checks:
        if bool(bad.any()):
            e, at = _where(bad, per_expert)
            byte = int(b[tuple(int(i) for i in torch.nonzero(bad)[0])])
            raise CheckpointFormatError(
                files.file_of(name), name,
                f"finite non-negative {kind.upper()} block scales ({_whose(name, e)}), got {what} byte 0x{byte:02x} "
                f"at {at} ({int(bad.sum())} of {b.numel()} scales {what})")
    return t


def per_tensor_scale(files, name: str, t: torch.Tensor) -> torch.Tensor:
    v = t.to(torch.float32).reshape(-1)
    bad = ~(torch.isfinite(v) & (v > 0))
    if bool(bad.any()):
        x = float(v[torch.nonzero(bad)[0, 0]])
        raise CheckpointFormatError(files.file_of(name), name,
                                    f"a finite positive {name.rsplit('.', 1)[-1]} ({_whose(name)}), got {x:g}")
    return t


def same_pair(files, gate_name: str, up_name: str, g: torch.Tensor, u: torch.Tensor) -> None:
    """gate and up of one expert share one per-tensor weight scale (vLLM's w13 holds one)."""
    if not torch.equal(g.reshape(-1), u.reshape(-1)):
        raise CheckpointFormatError(files.file_of(up_name), up_name,
                                    f"the value of {gate_name} ({_whose(up_name)}: gate and up share one global "
                                    f"scale), got {float(u.reshape(-1)[0]):g} against {float(g.reshape(-1)[0]):g}")



def finite_bias(files, name: str, t: torch.Tensor) -> torch.Tensor:
    """Per-expert bias [E, N]: every value finite (dim 0 is the expert)."""
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        e, col = (int(i) for i in torch.nonzero(bad)[0])
        raise CheckpointFormatError(files.file_of(name), name,
                                    f"finite bias values (expert {e}), got {float(t[e, col])} at column {col} "
                                    f"({int(bad.sum())} of {t.numel()} values not finite)")
    return t
