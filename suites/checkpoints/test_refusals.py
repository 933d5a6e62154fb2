"""Bad checkpoints are refused with one line naming the file, the tensor or
config field, and what was expected (never read as something else)."""
import torch

from suites.checkpoints.corrupt import E0, copy, refused


def test_scale_stored_as_float32_is_refused(tmp_path):
    name = f"{E0}.gate_proj.weight_scale"
    f = copy(tmp_path, "llmcompressor", "nvfp4", tensors=lambda t: t.update({name: t[name].to(torch.float32)}))
    refused(f, name, "float8_e4m3fn", "torch.float32")


def test_missing_tensor_is_named(tmp_path):
    f = copy(tmp_path, "modelopt", "nvfp4", tensors=lambda t: t.pop(f"{E0}.up_proj.weight_scale_2"))
    refused(f, "experts.0.up", "weight_scale_2")


def test_config_block_size_is_checked(tmp_path):
    f = copy(tmp_path, "llmcompressor", "nvfp4",
              config=lambda q: q["config_groups"]["group_0"]["weights"].update(group_size=32))
    refused(f, "config.json", "weights.group_size", "16")


def test_gate_and_up_global_scales_must_agree(tmp_path):
    name = f"{E0}.up_proj.weight_global_scale"
    f = copy(tmp_path, "llmcompressor", "nvfp4", tensors=lambda t: t.update({name: t[name] * 2}))
    refused(f, name, f"{E0}.gate_proj.weight_global_scale", "expert 0", "share one global scale")


def test_quark_activation_scale_mode_must_be_the_schemes(tmp_path):
    f = copy(tmp_path, "quark", "mxfp4",
              config=lambda q: q["global_quant_config"]["input_tensors"].update(scale_calculation_mode="floor"))
    refused(f, "input_tensors.scale_calculation_mode", "'even'", "'floor'")


def test_gptoss_one_expert_bias_without_the_other_is_refused(tmp_path):
    name = "model.layers.0.mlp.experts.gate_up_proj_bias"
    f = copy(tmp_path, "gpt-oss", "mxfp4", tensors=lambda t: t.update({name: torch.zeros(8, 128)}))
    refused(f, "model.layers.0.mlp.experts.down_proj_bias", f"{name} is present", "come together", "missing")


def test_unquantized_folder_names_the_missing_quant_method(tmp_path):
    from harness.models.source import model_dir

    refused(model_dir(), "quant_method", "no quantization_config")
