"""Which producer format a checkpoint folder holds, from its quantization
config; the readers by format name."""
from __future__ import annotations

import importlib

from harness.checkpoints.errors import CheckpointFormatError

READERS = {
    "compressed-tensors": "harness.checkpoints.read_compressed_tensors",
    "modelopt": "harness.checkpoints.read_modelopt",
    "quark": "harness.checkpoints.read_quark",
    "gpt-oss": "harness.checkpoints.read_gptoss",
}
FORMAT_NAMES = tuple(READERS)


def reader(fmt: str):
    if fmt not in READERS:
        raise ValueError(f"unknown checkpoint format {fmt!r}; expected one of {', '.join(READERS)}")
    return importlib.import_module(READERS[fmt])


def detect(config: dict, where) -> str:
    """The format name; CheckpointFormatError when no reader recognises the
    config (an unquantized checkpoint included: it has no producer format)."""
    found = [f for f in READERS if reader(f).recognises(config)]
    if len(found) != 1:
        qm = (config.get("quantization_config") or {}).get("quant_method")
        raise CheckpointFormatError(where, "config.json quantization_config.quant_method",
                                    "one of compressed-tensors, modelopt, quark, mxfp4 (gpt-oss), got "
                                    + (repr(qm) if qm else "no quantization_config"))
    return found[0]
