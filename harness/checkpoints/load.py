"""A producer checkpoint folder -> the harness' MoE quant configs, one per
sparse-MoE block, read as the producer wrote it (format, scheme, tensors).

`expect` (a format name) makes a mismatched folder an error naming both.
Non-expert tensors are not read here; `base_mismatches` lists those that
differ from the float model they were made from (the lm-eval run takes the
float model's, so they must be equal bit for bit).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.checkpoints import detect, files as cfiles
from harness.checkpoints.errors import CheckpointFormatError


@dataclass
class LoadedCheckpoint:
    folder: Path
    fmt: str
    scheme: str                                     # harness MoE scheme
    tensors: dict = field(default_factory=dict)     # block -> stacked tensors (loader input)
    quant_configs: dict = field(default_factory=dict)  # block -> MoEQuantConfig


def identify(folder, expect: str | None = None) -> tuple:
    """(files, format, harness scheme): the files opened (index and shards
    consistent, headers valid), the format from the config, and the expert
    tensors complete against config.json (names only; nothing is read). A
    format other than `expect` is a CheckpointFormatError naming both."""
    ckpt, fmt, scheme, _ = _identify(folder, expect)
    return ckpt, fmt, scheme


def _identify(folder, expect):
    ckpt = cfiles.CheckpointFiles(folder)
    fmt = detect.detect(ckpt.config, ckpt.folder / "config.json")
    if expect is not None and fmt != expect:
        raise CheckpointFormatError(ckpt.folder, "producer format", f"{expect} (as the config names), found {fmt}")
    r = detect.reader(fmt)
    scheme = r.scheme(ckpt)
    blocks = r.groups(ckpt.keys())
    if not blocks:
        raise CheckpointFormatError(ckpt.folder, "expert tensors", f"quantized MoE experts in the {fmt} layout, found none")
    r.complete(ckpt, blocks, scheme)
    return ckpt, fmt, scheme, blocks


def read_tensors(folder, expect: str | None = None) -> tuple:
    """(files, format, harness scheme, {block: stacked tensors}) without building quant configs;
    every scale value checked (values.py)."""
    ckpt, fmt, scheme, blocks = _identify(folder, expect)
    r = detect.reader(fmt)
    return ckpt, fmt, scheme, {b: r.block_tensors(ckpt, b, blocks[b], scheme) for b in sorted(blocks)}


def load_checkpoint(folder, expect: str | None = None) -> LoadedCheckpoint:
    ckpt, fmt, scheme, tensors = read_tensors(folder, expect)
    r = detect.reader(fmt)
    out = LoadedCheckpoint(ckpt.folder, fmt, scheme, tensors)
    for b, t in tensors.items():
        try:
            out.quant_configs[b] = r.quant_config(t, scheme)
        except ValueError as e:
            raise CheckpointFormatError(ckpt.folder, f"{b} experts", f"tensors the {fmt} loader accepts ({e})") from e
    return out


def base_mismatches(folder, base_dir) -> list[str]:
    """Names of non-expert tensors of the checkpoint that are absent from, or
    not bit-identical to, the float model at base_dir (its tied lm_head aside)."""
    import torch

    ckpt = cfiles.CheckpointFiles(folder)
    base = cfiles.CheckpointFiles(base_dir)
    bad = []
    for k in base.keys():
        if ".experts." in k:
            continue
        t = ckpt.optional(k)
        if t is None or t.dtype != base.get(k).dtype or not torch.equal(t, base.get(k)):
            bad.append(k)
    return bad
