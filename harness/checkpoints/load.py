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

import torch

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


# a dense shared MLP's projections: <prefix>.<name>.<part>
SHARED_PROJ = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def read_shared(files, fmt: str, prefix: str, scheme: str) -> dict | None:
    """The quantized dense shared MLP at `prefix` (`<prefix>.gate_proj.<part>`,
    up_proj, down_proj; the parts the format stores per expert projection) as
    the loader tensors of a one-expert block; None when the checkpoint has no
    tensor under `prefix`. A format without per-expert projections (gpt-oss),
    a missing projection or part: CheckpointFormatError naming the tensor."""
    r = detect.reader(fmt)
    names: dict = {}
    for k in files.keys():
        if k.startswith(prefix + "."):
            proj, _, part = k[len(prefix) + 1:].partition(".")
            if proj in SHARED_PROJ and part and "." not in part:
                names.setdefault(SHARED_PROJ[proj], {})[part] = k
    if not names:
        return None
    if not r.SHARED_EXPERT:
        raise CheckpointFormatError(files.folder, prefix, f"no shared expert in the {fmt} layout, found "
                                    f"{next(iter(next(iter(names.values())).values()))}")
    for proj, pname in ((v, k) for k, v in SHARED_PROJ.items()):
        for part in r.parts(scheme):
            if part not in names.get(proj, {}):
                raise CheckpointFormatError(files.folder, f"{prefix}.{pname}.{part}",
                                            f"this tensor (the shared expert's gate, up, down x "
                                            f"{', '.join(r.parts(scheme))} in {scheme}), it is missing")
    return r.block_tensors(files, prefix, {0: names}, scheme)


def router_vector(files, name: str, n: int):
    """A float router tensor [n] (DeepSeek's e_score_correction_bias) as float32,
    None when absent; dtype, shape and finiteness checked, naming the tensor."""
    if name not in files.keys():
        return None
    t = cfiles.check_tensor(files, name, files.get(name), dtype=FLOAT_DTYPES, shape=(n,))
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0, 0])
        raise CheckpointFormatError(files.file_of(name), name, f"finite values, got {float(t[i])} at expert {i}")
    return t.to(torch.float32)


def quant_config(fmt: str, tensors: dict, scheme: str, folder, what: str):
    """The reader's quant config; a loader ValueError as one line naming `what`."""
    try:
        return detect.reader(fmt).quant_config(tensors, scheme)
    except ValueError as e:
        raise CheckpointFormatError(folder, what, f"tensors the {fmt} loader accepts ({e})") from e


def base_mismatches(folder, base_dir) -> list[str]:
    """Names of non-expert tensors of the checkpoint that are absent from, or
    not bit-identical to, the float model at base_dir (its tied lm_head aside)."""
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
