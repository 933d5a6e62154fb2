"""`harness.checkpoint` of an accuracy config: evaluate the MoE experts of a
producer checkpoint (read by harness.checkpoints) instead of quantizing the
float weights in the harness.

    checkpoint:
      format: compressed-tensors   # required: the producer format the folder must hold
      producer: llmcompressor      # bundled tiny MoE: made by `moe-harness checkpoint make`
      producer_scheme: nvfp4       #   (cached), or
      subdir: Qwen3-30B-A3B-NVFP4  # a real checkpoint under $<harness.model_dir_env>

The baseline and every non-expert layer come from the float model
(model_name / model_subdir); the scheme's MoE blocks take the checkpoint's
expert tensors through the format's reader. A folder that is absent skips
the run like a missing model (exit 3 under HARNESS_REQUIRE_CHECKPOINT=1);
a folder in another format, or one the reader refuses, fails it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_KEYS = {"format", "producer", "producer_scheme", "subdir"}


@dataclass(frozen=True)
class CheckpointSpec:
    format: str
    producer: str | None = None
    producer_scheme: str | None = None
    subdir: str | None = None


def parse(path, raw, scheme, model_dir_env):
    from harness.checkpoints import detect, producers

    from .config import ConfigError, _mapping, _str

    if raw is None:
        return None
    m = _mapping(path, "harness.checkpoint", raw, CHECKPOINT_KEYS)
    fmt = _str(path, "harness.checkpoint.format", m.get("format"))
    if fmt not in detect.FORMAT_NAMES:
        raise ConfigError(path, "harness.checkpoint.format", f"expected one of {', '.join(detect.FORMAT_NAMES)}, got {fmt!r}")
    spec = CheckpointSpec(fmt, *(_str(path, f"harness.checkpoint.{k}", m.get(k), allow_none=True)
                                 for k in ("producer", "producer_scheme", "subdir")))
    if (spec.producer is None) == (spec.subdir is None):
        raise ConfigError(path, "harness.checkpoint", "give either producer + producer_scheme (tiny model) or subdir")
    if spec.producer is not None:
        try:
            p = producers.get(spec.producer)
            want = producers.harness_scheme(spec.producer, spec.producer_scheme)
        except ValueError as e:
            raise ConfigError(path, "harness.checkpoint", str(e)) from None
        if p.fmt != fmt:
            raise ConfigError(path, "harness.checkpoint.format", f"{spec.producer} writes {p.fmt}, not {fmt}")
        if scheme != want:
            raise ConfigError(path, "harness.scheme", f"{spec.producer} {spec.producer_scheme} is evaluated as {want}, got {scheme}")
    elif model_dir_env is None:
        raise ConfigError(path, "harness.checkpoint.subdir", "needs harness.model_dir_env (the folder holding it)")
    return spec


def resolve(cfg) -> str:
    """The checkpoint folder. ModelNotPresent (skip) when absent;
    ProducerUnavailable (skip, with the reason) when its producer is not
    installed; CheckpointFormatError / MakeFailed (fail) otherwise."""
    from harness.checkpoints import load
    from harness.checkpoints.make import make_checkpoint

    from .config import ModelNotPresent

    spec = cfg.checkpoint
    if spec.producer is not None:
        folder = make_checkpoint(spec.producer, spec.producer_scheme)
    else:
        root = os.environ.get(cfg.model_dir_env)
        if not root:
            raise ModelNotPresent(f"{cfg.model_name}: ${cfg.model_dir_env} is not set (checkpoint {spec.subdir}/)")
        folder = Path(root) / spec.subdir
        if not (folder / "config.json").is_file():
            raise ModelNotPresent(f"{cfg.model_name}: no {spec.format} checkpoint at {folder} (config.json missing)")
    _, fmt, scheme = load.identify(folder, expect=spec.format)
    if scheme != cfg.scheme:
        from harness.checkpoints.errors import CheckpointFormatError

        raise CheckpointFormatError(folder, "scheme", f"{cfg.scheme} (as {cfg.path} names), the {fmt} config gives {scheme}")
    return str(folder)


def resolve_or_result(cfg, name: str, scheme: str):
    """(folder, None), or (None, the run's result): skipped when the
    checkpoint or its producer is absent, failed when it is unreadable."""
    from harness.checkpoints.errors import CheckpointFormatError
    from harness.checkpoints.make import MakeFailed, ProducerUnavailable

    from .config import ModelNotPresent

    def result(passed, skipped, message):
        return None, {"name": name, "passed": passed, "skipped": skipped, "message": message,
                      "details": {"scheme": scheme, "checkpoint_format": cfg.checkpoint.format, "gates": [],
                                                   "metrics": {}}, "time": 0.0, "raw": {}}

    try:
        return resolve(cfg), None
    except (ModelNotPresent, ProducerUnavailable) as e:
        return result(True, True, f"SKIPPED: {e}")
    except (CheckpointFormatError, MakeFailed) as e:
        return result(False, False, f"FAILED: checkpoint: {e}")
