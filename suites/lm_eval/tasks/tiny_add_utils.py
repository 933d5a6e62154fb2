"""Dataset loaders for the tiny-moe tasks: read the JSONL next to this file.

Used through `custom_dataset: !function tiny_add_utils.load` so the tasks do
not depend on the working directory or on the `datasets` download cache.
"""

import json
from pathlib import Path

import datasets

HERE = Path(__file__).resolve().parent


def load(file=None, **_ignored):
    if not file:
        raise ValueError("tiny_add task: dataset_kwargs.file is required")
    with open(HERE / file) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {"test": datasets.Dataset.from_list(rows)}
