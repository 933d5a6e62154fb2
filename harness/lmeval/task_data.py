"""Where a task's data is, found before anything loads (torch-free, no lm-eval
import): a task YAML is looked up in the bundled tasks, the folders of
`eval --include-path` (searched first, as lm-eval's include_path overrides
its registry) and lm-eval's own task registry, read as text; a group or tag
stands for its tasks; `include:` templates are followed. Its data is local
when

- `dataset_path` is a folder or file on this machine, or a builder (json,
  csv, parquet, ...) whose `data_files` are, or the task has `custom_dataset`
  (the bundled tasks read their JSONL that way);
- the Hugging Face dataset `dataset_path` (config `dataset_name`) is in the
  local datasets cache (`<org>___<name>/<config>/`) or hub cache
  (`datasets--<org>--<name>/snapshots/`), where `datasets` finds it offline.

Otherwise the run is refused in the dry run with one line naming the task
and how to provide its data: nothing is ever downloaded.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from harness.lmeval import task_names
from harness.util import offline

BUILDERS = ("json", "csv", "parquet", "text", "arrow")   # datasets' packaged builders: data_files say where
_TASK = re.compile(r"^task:\s*[\"']?([^\s\"'#\[]+)", re.M)
_GROUP = re.compile(r"^group:\s*[\"']?([^\s\"'#\[]+)", re.M)
_TAG_BLOCK = re.compile(r"^tag:\s*(?:[\"']?([^\s\"'#\[]+)|\n((?:\s*-\s*\S+\s*\n?)+))", re.M)


class _Loader(yaml.SafeLoader):
    """lm-eval task files use `!function module.name`; the data check needs none of it."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


@dataclass(frozen=True)
class Data:
    task: str          # the leaf task whose data this is
    local: bool
    where: str         # what was found, or what is missing and where it was looked for
    dataset: str | None = None
    config: str | None = None


def _read(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def resolved(path: Path, depth: int = 0) -> dict:
    """A task file with its `include:` templates merged in (the file's own keys win)."""
    data = _read(path)
    inc = data.get("include")
    if isinstance(inc, str) and depth < 8:
        base = resolved((path.parent / inc) if not os.path.isabs(inc) else Path(inc), depth + 1)
        data = {**base, **data}
    return data


@lru_cache(maxsize=None)
def _index(root: str) -> dict:
    """name -> [(file, kind)] for every YAML under root; kind: task | group | tag."""
    out: dict = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith((".yaml", ".yml")) and not f.startswith("_default"):
                continue
            path = Path(dirpath, f)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for name in _TASK.findall(text):
                out.setdefault(name, []).append((path, "task"))
            for name in _GROUP.findall(text):
                out.setdefault(name, []).append((path, "group"))
            for one, block in _TAG_BLOCK.findall(text):
                for name in ([one] if one else re.findall(r"-\s*[\"']?([^\s\"'#]+)", block)):
                    out.setdefault(name, []).append((path, "tag"))
    return out


def roots(include_paths=()) -> list[str]:
    """Task folders in lookup order: --include-path folders, the bundled tasks, lm-eval's registry."""
    out = [str(Path(p).resolve()) for p in include_paths] + [str(task_names.TASKS_DIR)]
    reg = task_names._registry_dir()
    if reg is not None:
        out.append(str(reg))
    return out


def find(name: str, include_paths=()) -> list[tuple[Path, str]]:
    for root in roots(include_paths):
        hits = _index(root).get(name)
        if hits:
            return hits
    return []


def leaf_tasks(name: str, include_paths=(), depth: int = 0) -> list[tuple[str, dict]] | None:
    """[(task name, its resolved YAML)] a name stands for; None when no task file names it."""
    hits = find(name, include_paths)
    if not hits:
        return None
    tasks = [h for h in hits if h[1] == "task"]
    if tasks:
        return [(name, resolved(tasks[0][0]))]
    out = []
    for path, kind in hits:
        if kind == "group":
            children = _read(path).get("task") or []
            for child in children if isinstance(children, list) else [children]:
                child = child.get("task") if isinstance(child, dict) else child
                if isinstance(child, str) and depth < 8:
                    out += leaf_tasks(child, include_paths, depth + 1) or []
            break
        if kind == "tag":
            data = resolved(path)
            if isinstance(data.get("task"), str):
                out.append((data["task"], data))
    return out


def datasets_cache_dir() -> Path:
    """The user's datasets cache (as `datasets` finds it), not the run's private one."""
    return offline.user_hf_cache("datasets")


def _local_files(files, base: Path) -> list[Path]:
    """data_files as `datasets` resolves them: relative to the current folder."""
    if isinstance(files, dict):
        files = [f for v in files.values() for f in (v if isinstance(v, list) else [v])]
    elif not isinstance(files, list):
        files = [files]
    return [Path(f) if os.path.isabs(str(f)) else base / str(f) for f in files if f]


def data_of(task: str, spec: dict, base: Path, hub_cache: Path) -> Data:
    if spec.get("custom_dataset") is not None or "custom_dataset" in spec:
        return Data(task, True, "custom_dataset (the task reads its own files)")
    path = spec.get("dataset_path")
    config = spec.get("dataset_name")
    kwargs = spec.get("dataset_kwargs") or {}
    if not isinstance(path, str):
        return Data(task, False, "no dataset_path in its task file")
    if path in BUILDERS:
        files = _local_files(kwargs.get("data_files") or kwargs.get("data_dir") or [], base)
        missing = [str(f) for f in files if not f.exists()]
        return Data(task, bool(files) and not missing, f"{path} files " + (", ".join(missing) + " missing" if missing
                    else ", ".join(map(str, files)) or "(none given)"), path, config)
    local = Path(path).expanduser() if os.path.isabs(path) or path.startswith(("~", ".")) else base / path
    if ("/" not in path or path.startswith(("/", ".", "~"))) and local.exists():
        return Data(task, True, f"local {local}", path, config)
    ds = datasets_cache_dir() / path.replace("/", "___")
    if ds.is_dir() and (config is None or (ds / str(config)).is_dir() or any(ds.glob(f"{config}*"))):
        return Data(task, True, f"datasets cache {ds}", path, config)
    snaps = hub_cache / f"datasets--{path.replace('/', '--')}" / "snapshots"
    if snaps.is_dir() and any(snaps.iterdir()):
        return Data(task, True, f"hub cache {snaps.parent}", path, config)
    return Data(task, False, f"the Hugging Face dataset {path}" + (f" ({config})" if config else "")
                + f" is in neither the datasets cache ({datasets_cache_dir()}) nor the hub cache ({hub_cache})",
                path, config)


def check(name: str, include_paths, hub_cache: Path) -> list[Data] | None:
    """Data of every task `name` stands for; None when no task file names it."""
    leaves = leaf_tasks(name, include_paths)
    if leaves is None:
        return None
    return [data_of(task, spec, Path.cwd(), hub_cache) for task, spec in leaves]


def reported_metrics(name: str, include_paths=()) -> set[str] | None:
    """The "metric,filter" names lm-eval reports for a single task, read from
    its file (every metric under every filter_list name, else ",none"); None
    for a group or tag, or a file that names no metric."""
    leaves = leaf_tasks(name, include_paths)
    if not leaves or len(leaves) != 1 or leaves[0][0] != name:
        return None
    spec = leaves[0][1]
    metrics = [m.get("metric") for m in spec.get("metric_list") or [] if isinstance(m, dict)]
    filters = [f.get("name") for f in spec.get("filter_list") or [] if isinstance(f, dict)] or ["none"]
    names = {f"{m},{f}" for m in metrics for f in filters if isinstance(m, str) and isinstance(f, str)}
    return names or None


def how_to_provide(d: Data) -> str:
    """The one-line remedy for missing data."""
    if d.dataset in BUILDERS or d.dataset is None:
        return "fix the task's data_files, or pass --include-path DIR with a task YAML whose data is on this machine"
    args = repr(d.dataset) + (f", {d.config!r}" if d.config else "")
    return (f"nothing is downloaded: run `datasets.load_dataset({args})` once where the hub is reachable and copy "
            "the datasets cache here (HF_DATASETS_CACHE), or pass --include-path DIR with a task YAML of the same "
            "name whose dataset_path is a local copy")
