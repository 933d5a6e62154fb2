"""`make_checkpoint(producer, scheme)`: run the producer's maker on the bundled
tiny MoE once per (producer versions, scheme, model hash) and return the
cached folder. The folder is built under a temporary name and renamed into
place with its made.json last, so an interrupted make never looks complete."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.checkpoints import cache, producers
from harness.models import source


class ProducerUnavailable(RuntimeError):
    """The producer's libraries are not installed here (the message says which)."""


class MakeFailed(RuntimeError):
    """The producer ran and failed; the message names its log."""


def _run_worker(producer: str, scheme: str, work: Path, model_dir: Path, log: Path) -> dict:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    with open(log, "w") as fh:
        proc = subprocess.run([sys.executable, "-m", "harness.checkpoints.make_worker", producer, scheme, str(work),
                               str(model_dir)], stdout=subprocess.PIPE, stderr=fh, text=True, env=env)
        fh.write(proc.stdout)
    if proc.returncode != 0:
        raise MakeFailed(f"{producer} {scheme}: the producer failed (exit {proc.returncode}); its output: {log}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cached_path(producer: str, scheme: str, model_dir=None) -> Path:
    p = producers.get(producer)
    producers.harness_scheme(producer, scheme)
    return cache.checkpoint_dir(producer, producers.version_key(p), scheme, source.model_hash(model_dir))


def make_checkpoint(producer: str, scheme: str, *, force: bool = False, model_dir=None) -> Path:
    p = producers.get(producer)
    hscheme = producers.harness_scheme(producer, scheme)
    ok, why = producers.available(producer)
    if not ok:
        raise ProducerUnavailable(why)
    model_dir = Path(model_dir) if model_dir else source.model_dir()
    final = cached_path(producer, scheme, model_dir)
    if cache.is_complete(final) and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # one maker per folder at a time (pytest -n 2 workers may ask for the same checkpoint)
    with open(final.parent / f"{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.is_complete(final) and not force:
            return final
        return _make_locked(p, producer, scheme, hscheme, final, model_dir)


def _make_locked(p, producer, scheme, hscheme, final: Path, model_dir: Path) -> Path:
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        t0 = time.perf_counter()
        details = _run_worker(producer, scheme, work, model_dir, final.parent / f"{final.name}.log")
        made = {"producer": producer, "scheme": scheme, "harness_scheme": hscheme, "format": p.fmt,
                "versions": producers.versions(p), "model_hash": source.model_hash(model_dir),
                "calibration_docs": source.CALIBRATION_DOCS, "seconds": round(time.perf_counter() - t0, 1),
                "details": details, "note": p.note}
        if final.exists():
            shutil.rmtree(final)
        work.rename(final)
        (final / cache.MARKER).write_text(json.dumps(made, indent=2) + "\n")
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return final
