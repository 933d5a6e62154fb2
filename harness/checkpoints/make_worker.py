"""`python -m harness.checkpoints.make_worker PRODUCER SCHEME OUT_DIR MODEL_DIR`:
one maker in a fresh interpreter. Producer libraries patch transformers
globally (llmcompressor registers MoE load/save conversion mappings), so a
second producer in the same process can load the model with its experts
silently re-initialised; one process per make rules that out. Prints the
maker's details as the last line (JSON)."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from harness.checkpoints import producers
from harness.models import source


def main(argv) -> int:
    producer, scheme, out_dir, model_dir = argv

    maker = importlib.import_module(producers.get(producer).maker)
    details = maker.make(scheme, Path(out_dir), Path(model_dir), source.calibration_texts())
    print(json.dumps(details))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
