"""`make_checkpoint(producer, scheme)`: run the producer's maker on the float
model of its row (the bundled tiny MoE, or a tiny family model) once per (producer versions, scheme, model hash) and return the
cached version folder, verified (cache.py). The maker runs in its own
interpreter and process group, writing into a temporary folder that becomes
a version only when complete (cache.publish). Interrupted (SIGINT, SIGTERM,
KeyboardInterrupt), the maker's group gets SIGTERM, a grace period, then
SIGKILL, the temporary folder is removed and its log kept as
`<model hash>.failed.log`; the previous version stays the entry."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harness.checkpoints import cache, producers
from harness.models import source, tiny_family_make
from harness.util import interrupt


class ProducerUnavailable(RuntimeError):
    """The producer's libraries are not installed here (the message says which)."""


class MakeFailed(RuntimeError):
    """The producer ran and failed; the message names its log."""


def _run_worker(producer: str, scheme: str, work: Path, model_dir: Path, log: Path, kept_log: Path) -> dict:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    with open(log, "w") as err, tempfile.TemporaryFile("w+") as out:
        rc = interrupt.run_group([sys.executable, "-m", "harness.checkpoints.make_worker", producer, scheme,
                                  str(work), str(model_dir)], stdout=out, stderr=err, text=True, env=env)
        out.seek(0)
        text = out.read()
        err.write(text)
    if rc != 0:
        raise MakeFailed(f"{producer} {scheme}: the producer failed (exit {rc}); its output: {kept_log}")
    try:
        return json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise MakeFailed(f"{producer} {scheme}: the producer printed no details line; its output: {kept_log}") from None


def source_dir(producer: str) -> Path:
    """The float model the producer's row quantizes: the bundled tiny MoE, or
    its tiny family model (made into the harness cache on first use)."""
    p = producers.get(producer)
    return source.model_dir() if p.model is None else tiny_family_make.ensure(p.model)


def cached_path(producer: str, scheme: str, model_dir=None) -> Path:
    """The entry's link (cache.py); make_checkpoint returns the version it points at."""
    p = producers.get(producer)
    producers.harness_scheme(producer, scheme)
    model_dir = Path(model_dir) if model_dir else source_dir(producer)
    return cache.checkpoint_dir(producer, producers.version_key(p), scheme, source.model_hash(model_dir))


def _current(link: Path):
    try:
        return cache.current(link)
    except cache.CacheDamaged as e:
        print(f"moe-harness: cached checkpoint damaged, making it again: {e}", file=sys.stderr, flush=True)
        return None


def make_checkpoint(producer: str, scheme: str, *, force: bool = False, model_dir=None) -> Path:
    p = producers.get(producer)
    hscheme = producers.harness_scheme(producer, scheme)
    ok, why = producers.available(producer)
    if not ok:
        raise ProducerUnavailable(why)
    model_dir = Path(model_dir) if model_dir else source_dir(producer)
    link = cached_path(producer, scheme, model_dir)
    if not force and (v := _current(link)) is not None:
        return v
    link.parent.mkdir(parents=True, exist_ok=True)
    # one maker per entry at a time (pytest -n 2 workers may ask for the same checkpoint)
    with open(link.parent / f"{link.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (v := _current(link)) is not None:
            return v
        cache.retire_old(link, keep=None)  # stale temporaries of killed makes
        v = _make_locked(p, producer, scheme, hscheme, link, model_dir)
        cache.retire_old(link, keep=v)
        return v


def _make_locked(p, producer, scheme, hscheme, link: Path, model_dir: Path) -> Path:
    work = cache.temp_dir(link)
    log = work.with_name(work.name + ".log")
    kept_log = link.with_name(link.name + ".failed.log")
    try:
        t0 = time.perf_counter()
        details = _run_worker(producer, scheme, work, model_dir, log, kept_log)
        made = {"producer": producer, "scheme": scheme, "harness_scheme": hscheme, "format": p.fmt,
                "versions": producers.versions(p), "model_hash": source.model_hash(model_dir),
                "calibration_docs": source.CALIBRATION_DOCS, "seconds": round(time.perf_counter() - t0, 1),
                "details": details, "note": p.note}
        (work / cache.MARKER).write_text(json.dumps(made, indent=2) + "\n")
        os.replace(log, work / cache.LOG)
        return cache.publish(work, link)
    except BaseException:
        if log.exists():
            os.replace(log, kept_log)
        raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
