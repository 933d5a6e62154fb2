"""A checkpoint is read through its index when it has one, a tensor held by two
files is refused, and the expert tensors are complete against config.json
(every MoE layer x expert x projection x part) before anything is read.
Each refusal is one line naming the file, the tensor and what was expected;
`checkpoint check` exits 2 on it."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.checkpoints.load import load_checkpoint
from harness.lmeval import config as C
from harness.lmeval.evaluate import run_config

from suites.checkpoints.corrupt import E0, check_refuses, copy, refused

SCALE = f"{E0}.gate_proj.weight_scale"
CONFIGS = Path(__file__).resolve().parents[1] / "lm_eval" / "configs"


def _stale_scale(t):
    """Expert 0's gate scales replaced by expert 1's: valid bytes, every one different."""
    return {SCALE: t[SCALE.replace("experts.0.", "experts.1.")].clone()}


def _shard(folder, names, to="model-00002-of-00002.safetensors", src="model.safetensors"):
    """Move `names` out of `src` into a second file `to`."""
    t = load_file(str(folder / src))
    save_file({n: t.pop(n) for n in names}, str(folder / to))
    save_file(t, str(folder / src))


def _index(folder, mapping):
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": mapping}))


def _weight_map(folder):
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update({k: f.name for k in load_file(str(f))})
    return out


def test_a_stale_shard_shadowing_a_tensor_is_refused(tmp_path, capsys):
    f = copy(tmp_path, "llmcompressor", "nvfp4")
    save_file(_stale_scale(load_file(str(f / "model.safetensors"))), str(f / "zz-stale.safetensors"))
    check_refuses(f, capsys, SCALE, "model.safetensors", "zz-stale.safetensors")


def test_with_an_index_every_tensor_comes_from_the_file_it_names(tmp_path):
    f = copy(tmp_path, "llmcompressor", "nvfp4")
    _shard(f, [SCALE])
    _index(f, _weight_map(f))
    ref = load_checkpoint(f).tensors["model.layers.0.mlp"]["w13_weight_scale"]
    # a stale copy in the first file: the index names the second, which holds the right bytes
    t = load_file(str(f / "model.safetensors"))
    t.update(_stale_scale(t))
    save_file(t, str(f / "model.safetensors"))
    refused(f, SCALE, "model.safetensors", "the index names model-00002-of-00002.safetensors")
    t.pop(SCALE)
    save_file(t, str(f / "model.safetensors"))
    assert torch.equal(load_checkpoint(f).tensors["model.layers.0.mlp"]["w13_weight_scale"].view(torch.uint8),
                       ref.view(torch.uint8))


def test_a_file_the_index_does_not_name_is_refused(tmp_path):
    f = copy(tmp_path, "llmcompressor", "nvfp4")
    _index(f, _weight_map(f))
    save_file({"lm_head.extra": torch.zeros(2)}, str(f / "zz-stale.safetensors"))
    refused(f, "zz-stale.safetensors", "index")


def test_an_index_naming_a_missing_file_or_tensor_is_refused(tmp_path):
    f = copy(tmp_path, "llmcompressor", "nvfp4")
    m = _weight_map(f)
    _index(f, dict(m, **{SCALE: "model-00009.safetensors"}))
    refused(f, SCALE, "model-00009.safetensors")
    _index(f, dict(m, **{"model.layers.0.mlp.experts.99.gate_proj.weight_scale": "model.safetensors"}))
    refused(f, "experts.99", "model.safetensors")


def _eval_on(tmp_path, monkeypatch, damage):
    """The producer config's eval (8 items), its checkpoint a damaged copy of the cached one."""
    root = tmp_path / "agent"
    f = copy(root, "llmcompressor", "nvfp4", name="damaged")
    damage(f)
    monkeypatch.setenv("DAMAGED_CKPT_DIR", str(root))
    raw = (CONFIGS / "producer-llmcompressor-nvfp4.yaml").read_text()
    raw = raw.replace("    producer: llmcompressor\n    producer_scheme: nvfp4\n", "    subdir: damaged\n")
    raw = raw.replace("harness:\n", "harness:\n  model_dir_env: DAMAGED_CKPT_DIR\n", 1)
    (tmp_path / "cfg.yaml").write_text(raw)
    r = run_config(C.load(tmp_path / "cfg.yaml"), limit=8)
    assert not r["passed"] and not r.get("skipped"), r["message"]
    assert r["message"].startswith("FAILED: checkpoint:") and "\n" not in r["message"], r["message"]
    return r["message"]


def test_the_shadowed_tensor_fails_an_eval_run_with_a_clear_error(tmp_path, monkeypatch):
    def shadow(f):
        save_file(_stale_scale(load_file(str(f / "model.safetensors"))), str(f / "zz-stale.safetensors"))
    msg = _eval_on(tmp_path, monkeypatch, shadow)
    assert SCALE in msg and "zz-stale.safetensors" in msg, msg


def test_a_missing_expert_fails_an_eval_run_with_one_line(tmp_path, monkeypatch):
    def drop(f):
        t = load_file(str(f / "model.safetensors"))
        save_file({k: v for k, v in t.items() if ".experts.3." not in k}, str(f / "model.safetensors"))
    assert "experts.3" in _eval_on(tmp_path, monkeypatch, drop)


# ---- completeness against config.json


def test_the_last_expert_missing_is_refused(tmp_path, capsys):
    last = "model.layers.2.mlp.experts.7"
    f = copy(tmp_path, "llmcompressor", "nvfp4",
             tensors=lambda t: [t.pop(k) for k in [k for k in t if k.startswith(last + ".")]])
    check_refuses(f, capsys, "experts.7", "8 experts", "num_local_experts")


def test_a_whole_layers_experts_missing_is_refused(tmp_path, capsys):
    layer = "model.layers.1.mlp.experts."
    f = copy(tmp_path, "quark", "mxfp4",
             tensors=lambda t: [t.pop(k) for k in [k for k in t if k.startswith(layer)]])
    check_refuses(f, capsys, "model.layers.1.mlp", "num_hidden_layers")


def test_an_expert_beyond_the_configs_count_is_refused(tmp_path, capsys):
    def add(t):
        for k in [k for k in t if k.startswith(E0 + ".")]:
            t[k.replace("experts.0.", "experts.8.")] = t[k].clone()
    f = copy(tmp_path, "modelopt", "nvfp4", tensors=add)
    check_refuses(f, capsys, "experts.8", "num_local_experts")


def test_gptoss_experts_fewer_than_the_config_are_refused(tmp_path, capsys):
    def drop_last(t):
        for k in [k for k in t if k.startswith("model.layers.0.mlp.experts.")]:
            t[k] = t[k][:-1].clone()
    f = copy(tmp_path, "gpt-oss", "mxfp4", tensors=drop_last)
    check_refuses(f, capsys, "model.layers.0.mlp.experts", "8 experts")


def test_weight_and_scale_rows_dropped_together_are_refused(tmp_path, capsys):
    def drop(t):
        for s in ("weight_packed", "weight_scale"):
            k = f"{E0}.down_proj.{s}"
            t[k] = t[k][:-1].clone()
    f = copy(tmp_path, "llmcompressor", "mxfp4", tensors=drop)
    check_refuses(f, capsys, f"{E0}.down_proj.weight_packed", "shape")
