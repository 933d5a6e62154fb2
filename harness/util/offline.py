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


def _user_cache(var: str, sub: str) -> str:
    """Where huggingface_hub / datasets would look in the user's environment."""
    if os.environ.get(var):
        return str(Path(os.environ[var]).expanduser())
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return str(Path(home).expanduser() / sub)


def user_hf_cache(kind: str) -> Path:
    """The user's Hugging Face "hub" or "datasets" cache, not the private one a
    run switches to: as enter_offline remembered it, else where huggingface_hub /
    datasets would look."""
    saved = os.environ.get(f"HARNESS_USER_HF_{kind.upper()}_CACHE")
    if saved:
        return Path(saved)
    return Path(_user_cache(f"HF_{kind.upper()}_CACHE", kind))


def enter_offline(cache_root=None) -> Path:
    """Offline, with HF caches in a private folder. The user's own hub and
    datasets caches are remembered (HARNESS_USER_HF_HUB_CACHE,
    HARNESS_USER_HF_DATASETS_CACHE) and, when HARNESS_USER_HF_DATA=1 (an
    eval of lm-eval registry tasks whose data is cached there), read instead."""
    root = Path(cache_root) if cache_root else default_cache_root()
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HARNESS_USER_HF_HUB_CACHE", _user_cache("HF_HUB_CACHE", "hub"))
    os.environ.setdefault("HARNESS_USER_HF_DATASETS_CACHE", _user_cache("HF_DATASETS_CACHE", "datasets"))
    for key, value in OFFLINE_VARS.items():
        os.environ[key] = value
    os.environ["HF_HOME"] = str(root / "hf")
    user_data = os.environ.get("HARNESS_USER_HF_DATA") == "1"
    os.environ["HF_DATASETS_CACHE"] = (os.environ["HARNESS_USER_HF_DATASETS_CACHE"] if user_data
                                       else str(root / "hf" / "datasets"))
    os.environ["HF_HUB_CACHE"] = os.environ["HARNESS_USER_HF_HUB_CACHE"] if user_data else str(root / "hf" / "hub")
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
