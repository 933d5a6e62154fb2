"""Bad checkpoints are refused with one line naming the file, the tensor or
config field, and what was expected (never read as something else)."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import load_checkpoint

from suites.checkpoints.producer_checkpoints import made

E0 = "model.layers.0.mlp.experts.0"


def _copy(tmp_path, producer, scheme, tensors=None, config=None):
    src = made(producer, scheme)
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    if tensors is not None:
        t = load_file(str(dst / "model.safetensors"))
        tensors(t)
        save_file(t, str(dst / "model.safetensors"))
    if config is not None:
        c = json.loads((dst / "config.json").read_text())
        config(c["quantization_config"])
        (dst / "config.json").write_text(json.dumps(c))
    return dst


def _refused(folder, *needles):
    with pytest.raises(CheckpointFormatError) as e:
        load_checkpoint(folder)
    msg = str(e.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_scale_stored_as_float32_is_refused(tmp_path):
    name = f"{E0}.gate_proj.weight_scale"
    f = _copy(tmp_path, "llmcompressor", "nvfp4", tensors=lambda t: t.update({name: t[name].to(torch.float32)}))
    _refused(f, name, "float8_e4m3fn", "torch.float32")


def test_missing_tensor_is_named(tmp_path):
    f = _copy(tmp_path, "modelopt", "nvfp4", tensors=lambda t: t.pop(f"{E0}.up_proj.weight_scale_2"))
    _refused(f, "experts.0.up", "weight_scale_2")


def test_config_block_size_is_checked(tmp_path):
    f = _copy(tmp_path, "llmcompressor", "nvfp4",
              config=lambda q: q["config_groups"]["group_0"]["weights"].update(group_size=32))
    _refused(f, "config.json", "weights.group_size", "16")


def test_gate_and_up_global_scales_must_agree(tmp_path):
    name = f"{E0}.up_proj.weight_global_scale"
    f = _copy(tmp_path, "llmcompressor", "nvfp4", tensors=lambda t: t.update({name: t[name] * 2}))
    _refused(f, name, f"{E0}.gate_proj.weight_global_scale", "expert 0", "share one global scale")


def test_quark_activation_scale_mode_must_be_the_schemes(tmp_path):
    f = _copy(tmp_path, "quark", "mxfp4",
              config=lambda q: q["global_quant_config"]["input_tensors"].update(scale_calculation_mode="floor"))
    _refused(f, "input_tensors.scale_calculation_mode", "'even'", "'floor'")


def test_gptoss_expert_bias_is_refused(tmp_path):
    name = "model.layers.0.mlp.experts.gate_up_proj_bias"
    f = _copy(tmp_path, "gpt-oss", "mxfp4", tensors=lambda t: t.update({name: torch.zeros(8, 128)}))
    _refused(f, name, "no expert bias")


def test_unquantized_folder_names_the_missing_quant_method(tmp_path):
    from harness.models.source import model_dir

    _refused(model_dir(), "quant_method", "no quantization_config")
