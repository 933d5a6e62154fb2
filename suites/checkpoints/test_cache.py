"""The checkpoint cache is verified, never trusted on a marker: every entry
records the size and sha256 of each of its files, a make writes a temporary
folder and renames it into place only when complete, and a reader verifies
the entry before use. A damaged entry is made again, never returned.
These tests use a private cache ($MOE_HARNESS_CACHE_DIR under tmp) and the
gpt-oss producer (the harness' own quantizer: seconds)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from harness.checkpoints import cache, make
from harness.checkpoints.load import load_checkpoint
from harness.checkpoints.make import make_checkpoint

ROOT = Path(__file__).resolve().parents[2]

P, S = "gpt-oss", "mxfp4"


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _usable(folder):
    """What a reader of the cache relies on: made.json parses, the checkpoint loads."""
    json.loads((folder / "made.json").read_text())
    load_checkpoint(folder)


def test_an_empty_made_json_is_not_trusted(private_cache):
    first = make_checkpoint(P, S)
    (first / "made.json").write_bytes(b"")     # what a make on a full disk left
    again = make_checkpoint(P, S)
    _usable(again)


def test_a_truncated_cached_safetensors_is_not_returned(private_cache):
    first = make_checkpoint(P, S)
    f = first / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    again = make_checkpoint(P, S)
    _usable(again)


def test_the_manifest_records_size_and_sha256_of_every_file(private_cache):
    v = make_checkpoint(P, S)
    files = json.loads((v / cache.MANIFEST).read_text())["files"]
    on_disk = {p.name for p in v.iterdir()} - {cache.MANIFEST, cache.READERS}
    assert set(files) == on_disk and {"made.json", "model.safetensors", "config.json", cache.LOG} <= on_disk
    for name, rec in files.items():
        assert rec["size"] == (v / name).stat().st_size and rec["sha256"] == cache.sha256_file(v / name)
    link = make.cached_path(P, S)
    assert link.is_symlink() and link.resolve() == v.resolve()


@pytest.mark.parametrize("damage", ["extra shard", "flipped byte", "manifest edited"])
def test_a_damaged_entry_is_made_again(private_cache, damage, capsys):
    v = make_checkpoint(P, S)
    if damage == "extra shard":
        save_file({"x": torch.zeros(1)}, str(v / "zz-stale.safetensors"))
    elif damage == "flipped byte":
        b = bytearray((v / "model.safetensors").read_bytes())
        b[-1] ^= 1
        (v / "model.safetensors").write_bytes(bytes(b))
    else:
        m = json.loads((v / cache.MANIFEST).read_text())
        m["files"]["config.json"]["size"] += 1
        (v / cache.MANIFEST).write_text(json.dumps(m))
    again = make_checkpoint(P, S)
    assert again != v and "damaged, making it again" in capsys.readouterr().err
    cache.verify(again)
    _usable(again)
    assert not v.exists()  # no reader held it: retired


def test_an_entry_from_before_manifests_is_made_again(private_cache):
    link = make.cached_path(P, S)
    link.mkdir(parents=True)
    (link / "made.json").write_text("{}")
    (link / "config.json").write_text("{}")
    v = make_checkpoint(P, S)
    assert link.is_symlink() and v != link
    _usable(v)


READER = """
import sys, time
from harness.checkpoints.make import make_checkpoint
from harness.checkpoints.load import load_checkpoint
v = make_checkpoint("gpt-oss", "mxfp4")
print(v, flush=True)
if sys.argv[1] == "hold":
    sys.stdin.readline()
    load_checkpoint(v)
else:
    bad = 0
    end = time.monotonic() + float(sys.argv[2])
    n = 0
    while time.monotonic() < end:
        try:
            load_checkpoint(make_checkpoint("gpt-oss", "mxfp4"))
        except Exception as e:
            bad += 1
            print("FAILED", type(e).__name__, e, flush=True)
        n += 1
    print("reads", n, "failed", bad, flush=True)
"""


def _reader(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", READER, *args], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def test_force_never_deletes_a_version_being_read(private_cache, tmp_path):
    first = make_checkpoint(P, S)
    os.close(cache._held.pop(first))  # this process lets go: only the child reads it
    r = _reader(tmp_path, "hold")
    assert r.stdout.readline().strip() == str(first)
    second = make_checkpoint(P, S, force=True)
    assert second != first and first.is_dir(), "a version in use was deleted"
    r.stdin.write("\n")
    r.stdin.flush()
    assert r.wait(timeout=120) == 0
    third = make_checkpoint(P, S, force=True)
    assert not first.exists() and third.is_dir()


def test_readers_never_fail_while_force_replaces_the_entry(private_cache, tmp_path):
    make_checkpoint(P, S)
    r = _reader(tmp_path, "loop", "15")
    r.stdout.readline()
    forced = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 12:
        make_checkpoint(P, S, force=True)
        forced += 1
    out = r.communicate(timeout=120)[0]
    assert r.returncode == 0 and "FAILED" not in out, out
    n = int(out.split("reads ")[1].split()[0])
    assert forced >= 2 and n >= 20, (forced, out)
    print(f"{n} reads, {forced} forced makes, 0 failed")
