"""The local lm-eval tasks of the tiny model (suites/lm_eval/tasks/).

Task data is generated from the corpus seed and committed as JSONL next to
the YAML files, so lm-eval reads it with no network and no `datasets` cache.
`write_task_files` regenerates the JSONL; a test checks the committed files
equal what the generator produces and that no item is in the training stream.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.lmeval import task_names
from harness.models import corpus

REPO_ROOT = Path(__file__).resolve().parents[2]
TASKS_DIR = REPO_ROOT / "suites" / "lm_eval" / "tasks"

TASK_FILES = {
    "tiny_add_mc": "tiny_add_mc.jsonl",
    "tiny_add_gen": "tiny_add_gen.jsonl",
    "tiny_add_rolling": "tiny_add_rolling.jsonl",
}
TINY_TASKS = tuple(TASK_FILES)
ROLLING_TASK = "tiny_add_rolling"

_KIND = {"tiny_add_mc": "mc", "tiny_add_gen": "gen", "tiny_add_rolling": "rolling"}

# The gsm8k-style stand-in (suites/lm_eval/tasks/tiny_add_gsm.yaml): few-shot
# generation of a worked answer ending in '#### <number>', scored by lm-eval's
# regex filters strict-match and flexible-extract. split -> file.
STANDIN_TASK = task_names.STAND_INS["gsm8k"]
STANDIN_FILES = {"train": "tiny_add_gsm_train.jsonl", "test": "tiny_add_gsm_test.jsonl"}
BUNDLED_TASKS = TINY_TASKS + (STANDIN_TASK,)


def tasks_dir() -> Path:
    return TASKS_DIR


def render(seed: int = corpus.DEFAULT_SEED) -> dict[str, str]:
    items = corpus.task_items(seed)
    out = {fname: _jsonl(items[_KIND[task]]) for task, fname in TASK_FILES.items()}
    worked = corpus.worked_items(seed)
    out.update({fname: _jsonl(worked[split]) for split, fname in STANDIN_FILES.items()})
    return out


def _jsonl(rows) -> str:
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def write_task_files(folder=None, seed: int = corpus.DEFAULT_SEED) -> list[Path]:
    folder = Path(folder) if folder else TASKS_DIR
    written = []
    for fname, text in render(seed).items():
        path = folder / fname
        path.write_text(text)
        written.append(path)
    return written


def read_rows(task: str, folder=None, split: str = "test") -> list[dict]:
    """A bundled task's rows (the stand-in has a "train" split too)."""
    folder = Path(folder) if folder else TASKS_DIR
    fname = STANDIN_FILES[split] if task == STANDIN_TASK else TASK_FILES[task]
    with open(folder / fname) as f:
        return [json.loads(line) for line in f if line.strip()]


def needs_registry(names) -> bool:
    """Whether any task is not bundled: lm-eval's own task registry is then indexed too."""
    return any(n not in BUNDLED_TASKS for n in names)


def task_manager(extra_paths=(), include_defaults: bool = False):
    """An lm-eval TaskManager that knows the bundled tasks, the folders of
    `extra_paths` (`eval --include-path`) and, with `include_defaults`,
    lm-eval's own registry (indexing it takes seconds: only when a config
    names a task that is not bundled). Data is never downloaded (offline)."""
    from lm_eval.tasks import TaskManager

    paths = [str(TASKS_DIR)] + [str(p) for p in extra_paths]
    return TaskManager(include_path=paths, include_defaults=include_defaults)


if __name__ == "__main__":
    for p in write_task_files():
        print(p)
