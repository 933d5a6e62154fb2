"""Where the shipped accuracy configs live: tiny-<scheme>.yaml per scheme and
producer-<producer>-<scheme>.yaml per row of the producer table."""
from __future__ import annotations

from pathlib import Path

from harness.checkpoints import producers

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "suites" / "lm_eval" / "configs"


def tiny_config_path(scheme: str) -> Path:
    return CONFIG_DIR / f"tiny-{scheme}.yaml"


def config_name(producer: str, scheme: str) -> str:
    return f"producer-{producer}-{scheme}.yaml"


def config_paths() -> list[Path]:
    """The config of every producer x scheme of the producer table, in its order."""
    return [CONFIG_DIR / config_name(name, s) for name, p in producers.PRODUCERS.items() for s in p.schemes]
