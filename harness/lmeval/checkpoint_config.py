"""`harness.checkpoint` of an accuracy config: evaluate the MoE experts of a
producer checkpoint (read by harness.checkpoints) instead of quantizing the
float weights in the harness. The section is parsed with the rest of the
config (harness.lmeval.config); this module finds the folder at run time.

    checkpoint:
      format: compressed-tensors   # required: the producer format the folder must hold
      producer: llmcompressor      # bundled tiny MoE: made by `moe-harness checkpoint make`
      producer_scheme: nvfp4       #   (cached), or
      subdir: Qwen3-30B-A3B-NVFP4  # a real checkpoint under $<harness.model_dir_env>

The baseline and every non-expert layer come from the float model
(model_name / model_subdir); the scheme's MoE blocks take the checkpoint's
expert tensors through the format's reader. A folder that is absent is
handled like a missing model: SKIPPED when the config marks the model
optional (exit 3 under HARNESS_REQUIRE_CHECKPOINT=1), else bad input (exit
2); a folder in another format, or one the reader refuses, fails the run.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.checkpoints import load
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.make import MakeFailed, ProducerUnavailable, make_checkpoint
from harness.lmeval.config import ModelNotPresent


def resolve(cfg) -> str:
    """The checkpoint folder. ModelNotPresent (skip) when absent;
    ProducerUnavailable (skip, with the reason) when its producer is not
    installed; CheckpointFormatError / MakeFailed (fail) otherwise."""
    spec = cfg.checkpoint
    if spec.producer is not None:
        folder = make_checkpoint(spec.producer, spec.producer_scheme)
    else:
        root = os.environ.get(cfg.model_dir_env)
        if not root:
            raise ModelNotPresent(f"{cfg.model_name}: ${cfg.model_dir_env} is not set (checkpoint {spec.subdir}/)",
                                  cfg.model_optional)
        folder = Path(root) / spec.subdir
        if not (folder / "config.json").is_file():
            raise ModelNotPresent(f"{cfg.model_name}: no {spec.format} checkpoint at {folder} (config.json missing)",
                                  cfg.model_optional)
    _, fmt, scheme = load.identify(folder, expect=spec.format)
    if scheme != cfg.scheme:
        raise CheckpointFormatError(folder, "scheme", f"{cfg.scheme} (as {cfg.path} names), the {fmt} config gives {scheme}")
    return str(folder)


def resolve_or_result(cfg, name: str, scheme: str):
    """(folder, None), or (None, the run's result): skipped when the
    checkpoint or its producer is absent, failed when it is unreadable."""
    def result(passed, skipped, message):
        return None, {"name": name, "passed": passed, "skipped": skipped, "message": message,
                      "details": {"scheme": scheme, "checkpoint_format": cfg.checkpoint.format, "gates": [],
                                                   "metrics": {}}, "time": 0.0, "raw": {}}

    try:
        return resolve(cfg), None
    except ModelNotPresent as e:
        if not e.optional:
            raise  # bad input: the command refuses it (exit 2)
        return result(True, True, f"SKIPPED: {e}")
    except ProducerUnavailable as e:
        return result(True, True, f"SKIPPED: {e}")
    except (CheckpointFormatError, MakeFailed) as e:
        return result(False, False, f"FAILED: checkpoint: {e}")
