"""Dataset loaders for the tiny-moe tasks: read the JSONL next to this file.

Used through `custom_dataset: !function tiny_add_utils.load` so the tasks do
not depend on the working directory or on the `datasets` download cache.
"""

import json
from pathlib import Path

import datasets

HERE = Path(__file__).resolve().parent


def _rows(file):
    with open(HERE / file) as f:
        return [json.loads(line) for line in f if line.strip()]


def load(file=None, **_ignored):
    if not file:
        raise ValueError("tiny_add task: dataset_kwargs.file is required")
    return {"test": datasets.Dataset.from_list(_rows(file))}


def load_splits(files=None, **_ignored):
    """dataset_kwargs.files: {split: jsonl file next to this one} (a test split
    and the few-shot pool)."""
    if not isinstance(files, dict) or not files:
        raise ValueError("tiny_add task: dataset_kwargs.files {split: file} is required")
    return {split: datasets.Dataset.from_list(_rows(file)) for split, file in files.items()}
