"""Corrupted copies of the cached producer checkpoints, for the refusal suites:
a copy in a tmp folder with its tensors or config edited, or a file added.
The cached originals are never touched."""
import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from harness import cli
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import load_checkpoint

from suites.checkpoints.producer_checkpoints import made

E0 = "model.layers.0.mlp.experts.0"
# what a made checkpoint folder holds besides the producer's files (cache bookkeeping)
CACHE_FILES = ("made.json", "manifest.json")


def copy(tmp_path, producer, scheme, tensors=None, config=None, name="ckpt"):
    """A copy of the cached checkpoint; `tensors(dict)` edits model.safetensors in
    place, `config(quantization_config)` edits config.json."""
    src = made(producer, scheme)
    dst = tmp_path / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*CACHE_FILES))
    if tensors is not None:
        t = load_file(str(dst / "model.safetensors"))
        tensors(t)
        save_file(t, str(dst / "model.safetensors"))
    if config is not None:
        c = json.loads((dst / "config.json").read_text())
        config(c["quantization_config"])
        (dst / "config.json").write_text(json.dumps(c))
    return dst


def refused(folder, *needles):
    """load_checkpoint raises one line holding every needle."""
    with pytest.raises(CheckpointFormatError) as e:
        load_checkpoint(folder)
    msg = str(e.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


def check_refuses(folder, capsys, *needles):
    """`moe-harness checkpoint check FOLDER` exits 2 with one line holding every needle."""
    rc = cli.main(["checkpoint", "check", str(folder)])
    cap = capsys.readouterr()
    assert rc == 2, (rc, cap.out, cap.err)
    err = cap.err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err
