"""Fully offline environment: no hub access, caches in a private folder.

`enter_offline(cache_root)` must run before transformers / datasets /
lm_eval are imported for the settings to take effect everywhere; it is
idempotent and returns the cache root.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

OFFLINE_VARS = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

CACHE_VARS = ("HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE", "TRANSFORMERS_CACHE")


def default_cache_root() -> Path:
    root = Path("reports") / ".cache"
    try:
        root.mkdir(parents=True, exist_ok=True)
        return root.resolve()
    except OSError:
        return Path(tempfile.mkdtemp(prefix="moe-harness-cache-"))


def enter_offline(cache_root=None) -> Path:
    root = Path(cache_root) if cache_root else default_cache_root()
    root.mkdir(parents=True, exist_ok=True)
    for key, value in OFFLINE_VARS.items():
        os.environ[key] = value
    os.environ["HF_HOME"] = str(root / "hf")
    os.environ["HF_DATASETS_CACHE"] = str(root / "hf" / "datasets")
    os.environ["HF_HUB_CACHE"] = str(root / "hf" / "hub")
    os.environ.pop("TRANSFORMERS_CACHE", None)  # deprecated; HF_HOME covers it
    return root


def set_threads(n: int | None = None) -> int:
    """Pin torch's thread count (the CI box has 2 cores shared by several jobs)."""
    import torch

    if n is None:
        n = int(os.environ.get("HARNESS_TORCH_THREADS", "2"))
    torch.set_num_threads(max(1, n))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set once in this process
    return torch.get_num_threads()
