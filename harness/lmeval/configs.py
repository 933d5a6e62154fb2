"""Where the shipped accuracy configs live: tiny-<scheme>.yaml per scheme,
tiny-<model_type>-<scheme>.yaml per tiny random family model and scheme of
its row (harness/models/tiny_families.py), and
producer-<producer>-<scheme>.yaml per row of the producer table."""
from __future__ import annotations

from pathlib import Path

from harness.checkpoints import producers
from harness.models import tiny_families

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "suites" / "lm_eval" / "configs"


def tiny_config_path(scheme: str) -> Path:
    return CONFIG_DIR / f"tiny-{scheme}.yaml"


def tiny_family_config_path(model_type: str, scheme: str) -> Path:
    return CONFIG_DIR / f"tiny-{model_type}-{scheme}.yaml"


def tiny_family_config_paths() -> list[Path]:
    """The config of every tiny family model x scheme of its row, in table order."""
    return [tiny_family_config_path(row.model_type, s) for row in tiny_families.TINY_FAMILIES.values()
            for s in row.schemes]


def config_name(producer: str, scheme: str) -> str:
    return f"producer-{producer}-{scheme}.yaml"


def config_paths() -> list[Path]:
    """The config of every producer x scheme of the producer table, in its order."""
    return [CONFIG_DIR / config_name(name, s) for name, p in producers.PRODUCERS.items() for s in p.schemes]
