"""The bundled tiny MoE as the producers see it.

It is a real transformers architecture (Qwen3MoeForCausalLM, config.json
written by transformers), so every producer loads it with its own Qwen3-MoE
support; nothing is re-declared for them. Calibration text is the documented
calibration set of the lm-eval runs (training-distribution documents, never
task items).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from harness.models import tiny_model
from harness.models import corpus

CALIBRATION_DOCS = 32


def model_dir() -> Path:
    return tiny_model.bundled_dir()


def model_hash(folder=None) -> str:
    """sha256 (first 16 hex digits) of config.json and model.safetensors."""
    folder = Path(folder) if folder else model_dir()
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        h.update(name.encode())
        h.update((folder / name).read_bytes())
    return h.hexdigest()[:16]


def calibration_texts(n: int = CALIBRATION_DOCS) -> list[str]:
    return corpus.calibration_texts(corpus.DEFAULT_SEED, n)
