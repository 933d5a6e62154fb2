"""Make the tiny random family models of harness/models/tiny_families.py:
the row's transformers config, `AutoModelForCausalLM.from_config` under
`torch.manual_seed(SEED)`, the row's `redraw` tensors drawn again from the
same generator, float32 safetensors and the bundled tokenizer. Written into a
private temporary folder next to the target and renamed into place with its
marker already inside, so a folder is either absent or complete (two
processes making the same model both succeed; one rename wins).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import transformers

from harness.models import tiny_families
from harness.models import tokenizer as tok


def build_model(name: str):
    """The seeded float32 model (not saved)."""
    row = tiny_families.TINY_FAMILIES[name]
    vocab = tok.vocab()
    config = getattr(transformers, row.config_class)(
        vocab_size=len(vocab), eos_token_id=vocab[tok.EOS], bos_token_id=vocab[tok.EOS],
        pad_token_id=vocab[tok.PAD], **row.arch)
    torch.manual_seed(tiny_families.SEED)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    found = {suffix: 0 for suffix, _ in row.redraw}
    with torch.no_grad():
        for pname, t in list(model.named_parameters()) + list(model.named_buffers()):
            for suffix, std in row.redraw:
                if pname.endswith(suffix):
                    t.normal_(0.0, std)
                    found[suffix] += 1
    missing = [s for s, n in found.items() if n == 0]
    if missing:
        raise ValueError(f"{name}: no tensor named *{missing[0]} in {type(model).__name__}")
    return model.eval()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make(name: str, out) -> Path:
    """Write the model into `out` (made.json last)."""
    out = Path(out)
    model = build_model(name)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    tok.save(out)
    meta = dict(tiny_families.recipe(name), params=sum(p.numel() for p in model.parameters()),
                sha256={"model.safetensors": _sha256(out / "model.safetensors")})
    (out / tiny_families.MARKER).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def ensure(name: str) -> Path:
    """The model's cache folder, made first when absent."""
    target = tiny_families.folder(name)
    if tiny_families.is_made(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        make(name, tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not tiny_families.is_made(target):  # not another process's finished copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
