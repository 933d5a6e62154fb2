"""Which task names an eval config may use, found without importing lm-eval.

The harness evaluates the bundled tasks (suites/lm_eval/tasks/*.yaml). A name
that is not bundled is looked up in the task files of the installed lm-eval
package (read as text), so a vLLM config naming gsm8k is told the truth:
known to lm-eval but not bundled here; a misspelt name is an error.
"""

from __future__ import annotations

import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parents[2] / "suites" / "lm_eval" / "tasks"
# Bundled stand-ins for registry tasks whose data is a hub dataset: a task of
# the same kind and metric names, run with `eval --task-map NAME=STAND_IN`:
# gsm8k (few-shot worked answers, strict / flexible extraction) and aime25
# (zero-shot generation of a number, exact match: tiny_add_gen).
STAND_INS = {"gsm8k": "tiny_add_gsm", "aime25": "tiny_add_gen"}
_TASK_LINE = re.compile(r"^task:\s*[\"']?([^\s\"'#]+)", re.M)


@lru_cache(maxsize=None)
def bundled(folder: Path = TASKS_DIR) -> frozenset[str]:
    names = set()
    for f in sorted(Path(folder).glob("*.yaml")):
        names.update(_TASK_LINE.findall(f.read_text(encoding="utf-8")))
    return frozenset(names)


def _registry_dir() -> Path | None:
    spec = importlib.util.find_spec("lm_eval")  # locates the package, runs none of it
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "tasks"
    return d if d.is_dir() else None


def in_registry(names) -> dict[str, bool] | None:
    """name -> found in lm-eval's task files (as a task, group, tag or list entry); None: lm-eval absent."""
    root = _registry_dir()
    if root is None:
        return None
    pending = {n: re.compile(rb"(?m)^[ \t-]*(?:(?:task|group|tag)[ \t]*:[ \t]*)?[\"']?" + re.escape(n.encode())
                             + rb"[\"']?[ \t]*(?:#.*)?$") for n in names}
    found = {n: False for n in names}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith((".yaml", ".yml")):
                continue
            try:
                data = Path(dirpath, f).read_bytes()
            except OSError:
                continue
            for n in [n for n, pat in pending.items() if n.encode() in data and pat.search(data)]:
                found[n] = True
                del pending[n]
            if not pending:
                return found
    return found
