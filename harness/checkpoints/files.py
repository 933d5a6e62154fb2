"""A checkpoint folder as the readers see it: config.json, the tensors of its
safetensors files (opened lazily: a real checkpoint is not read whole), and
the expert tensors grouped by MoE block, expert and projection.

Which file a tensor is read from: with `model.safetensors.index.json`, the
file its weight_map names; every safetensors file of the folder must be named
there, every tensor of every file must be in the map under that file, and
every mapped tensor must be in its file. Without an index, each tensor must be
in exactly one file. Anything else (a stale shard shadowing a tensor, a shard
the index does not know) is a CheckpointFormatError naming the files and the
tensor: the reader never picks one copy over another.

Expert tensor names: `<block>.experts.<e>.<proj>.<suffix>` with proj
gate_proj/up_proj/down_proj (transformers Qwen/Mixtral-5) or w1/w3/w2
(Mixtral-4 files); `<block>` is the sparse-MoE module path the lm-eval swap
uses (e.g. model.layers.0.mlp).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from safetensors import safe_open

from harness.checkpoints.errors import CheckpointFormatError

PROJ = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up", "w2": "down"}
_EXPERT = re.compile(r"^(?P<block>.+)\.experts\.(?P<e>\d+)\.(?P<proj>[A-Za-z0-9_]+)\.(?P<suffix>[A-Za-z0-9_]+)$")
INDEX = "model.safetensors.index.json"
SUFFIX = ".safetensors"


def _regular_file(path: Path, what: str) -> Path:
    """`path` itself when it is (a link to) a readable regular file, else one line saying what it is."""
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 reports a symlink loop this way
        raise CheckpointFormatError(path, what, "a regular file, got a symbolic link loop") from None
    except FileNotFoundError:
        kind = "a dangling symbolic link" if path.is_symlink() else "nothing (missing)"
        raise CheckpointFormatError(path, what, f"a regular file, got {kind}") from None
    except OSError as e:
        raise CheckpointFormatError(path, what, f"a regular file ({e.strerror or e})") from None
    if not path.is_file():
        raise CheckpointFormatError(path, what, "a regular file, got a folder" if path.is_dir() else "a regular file")
    return path


def read_json(path: Path, what: str, required: bool = True):
    """The JSON object in `path` (None when absent and not required); invalid
    UTF-8, invalid JSON or a non-object is one line naming the file."""
    if not required and not path.exists() and not path.is_symlink():
        return None
    _regular_file(path, what)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointFormatError(path, what, f"UTF-8 text, got byte 0x{e.object[e.start]:02x} at offset {e.start}") from None
    except OSError as e:
        raise CheckpointFormatError(path, what, f"a readable file ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointFormatError(path, what, f"valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(data, dict):
        raise CheckpointFormatError(path, what, f"a JSON object, got a {type(data).__name__}")
    return data


def read_config(folder: Path) -> dict:
    cfg = read_json(folder / "config.json", "config.json")
    qc = cfg.get("quantization_config")
    if qc is not None and not isinstance(qc, dict):
        raise CheckpointFormatError(folder / "config.json", "quantization_config",
                                    f"a JSON object, got a {type(qc).__name__}")
    return cfg


def _open(path: Path):
    try:
        return safe_open(str(path), framework="pt")
    except Exception as e:  # safetensors raises its own error type, without the file's name
        raise CheckpointFormatError(path, "safetensors header", f"a valid safetensors file ({_one_line(e)})") from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _index_map(folder: Path, names: set) -> dict | None:
    idx = read_json(folder / INDEX, INDEX, required=False)
    if idx is None:
        return None
    wm = idx.get("weight_map")
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise CheckpointFormatError(folder / INDEX, "weight_map", "an object of tensor name -> file name")
    for k, v in wm.items():
        if v not in names:
            bad = "/" in v or v in (".", "..") or not v.endswith(SUFFIX)
            raise CheckpointFormatError(folder / INDEX, f"weight_map[{k!r}]",
                                        f"a safetensors file of this folder, got {v!r}"
                                        + (" (not a plain *.safetensors name)" if bad else " (no such file)"))
    return wm


class CheckpointFiles:
    def __init__(self, folder):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise CheckpointFormatError(self.folder, "checkpoint folder",
                                        "a folder with config.json and safetensors files"
                                        + (", got a file" if self.folder.exists() else ", got nothing (missing)"))
        self.config = read_config(self.folder)
        try:
            entries = sorted(p for p in self.folder.iterdir() if p.name.endswith(SUFFIX))
        except OSError as e:
            raise CheckpointFormatError(self.folder, "checkpoint folder", f"a readable folder ({e.strerror or e})") from None
        if not entries:
            raise CheckpointFormatError(self.folder, f"*{SUFFIX}", "at least one safetensors file")
        self._handles = {f: _open(_regular_file(f, "safetensors file")) for f in entries}
        holders: dict = {}
        for f, h in self._handles.items():
            for k in h.keys():
                holders.setdefault(k, []).append(f)
        by_name = {f.name: f for f in entries}
        wm = _index_map(self.folder, set(by_name))
        self._where = {}
        if wm is None:
            for k, fs in holders.items():
                if len(fs) > 1:
                    raise CheckpointFormatError(fs[0], k, f"one file holding this tensor, it is also in "
                                                f"{', '.join(f.name for f in fs[1:])} (and no {INDEX} says which to read)")
                self._where[k] = fs[0]
            return
        unnamed = sorted(set(by_name) - set(wm.values()))
        if unnamed:
            raise CheckpointFormatError(by_name[unnamed[0]], "safetensors file",
                                        f"a file the index names ({INDEX} names none of its tensors)")
        for k, fname in wm.items():
            if by_name[fname] not in holders.get(k, ()):
                raise CheckpointFormatError(by_name[fname], k, f"this tensor, as {INDEX} says (the file does not hold it)")
        for k, fs in holders.items():
            if k not in wm:
                raise CheckpointFormatError(fs[0], k, f"a tensor {INDEX} lists (it does not)")
            if len(fs) > 1:
                others = [f.name for f in fs if f.name != wm[k]]
                raise CheckpointFormatError(by_name[wm[k]], k, f"one file holding this tensor, it is also in "
                                            f"{', '.join(others)} (the index names {wm[k]})")
            self._where[k] = by_name[wm[k]]

    def keys(self):
        return self._where.keys()

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def get(self, name: str):
        if name not in self._where:
            raise CheckpointFormatError(self.folder, name, "this tensor in the checkpoint (it is missing)")
        try:
            return self._handles[self._where[name]].get_tensor(name)
        except Exception as e:  # a truncated or garbled data section
            raise CheckpointFormatError(self._where[name], name, f"a readable tensor ({_one_line(e)})") from None

    def header(self, name: str) -> tuple:
        """(safetensors dtype string, shape) from the header, without reading the data."""
        sl = self._handles[self.file_of(name)].get_slice(name)
        return sl.get_dtype(), tuple(sl.get_shape())

    def optional(self, name: str):
        return self.get(name) if name in self._where else None

    def json(self, name: str):
        return read_json(self.folder / name, name, required=False)


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
    if dtype is not None:
        allowed = dtype if isinstance(dtype, tuple) else (dtype,)
        if t.dtype not in allowed:
            raise CheckpointFormatError(files.file_of(name), name,
                                        f"dtype {' or '.join(str(d) for d in allowed)}, got {t.dtype}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise CheckpointFormatError(files.file_of(name), name, f"shape {tuple(shape)}, got {tuple(t.shape)}")
    return t
