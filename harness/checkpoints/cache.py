"""Where made checkpoints live: $MOE_HARNESS_CACHE_DIR (else
~/.cache/moe-harness)/checkpoints/<producer>-<version>/<scheme>/<model hash>/.
A folder is complete only once its `made.json` exists (written last)."""
from __future__ import annotations

import os
from pathlib import Path

MARKER = "made.json"


def cache_root() -> Path:
    env = os.environ.get("MOE_HARNESS_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "moe-harness"


def checkpoint_dir(producer: str, version: str, scheme: str, model_hash: str) -> Path:
    return cache_root() / "checkpoints" / f"{producer}-{version}" / scheme / model_hash


def is_complete(folder: Path) -> bool:
    return (Path(folder) / MARKER).is_file()
