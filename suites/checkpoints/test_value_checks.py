"""Scale values are checked on load, on the host, before any capture: block
scales finite and non-negative (E4M3 NaN code 0x7F/0xFF, a set sign bit;
E8M0 0xFF), per-tensor scales finite and positive. A refusal names the file,
the tensor (its expert and projection) and the value; `checkpoint check`
exits 2 on it instead of reporting a round trip that agrees on garbage."""
import pytest
import torch

from suites.checkpoints.corrupt import E0, check_refuses, copy, refused


def _set_byte(name, row, col, byte):
    def edit(t):
        v = t[name].view(torch.uint8).clone()
        v[row, col] = byte
        t[name] = v.view(t[name].dtype)
    return edit


def test_e4m3_nan_block_scale_is_refused(tmp_path, capsys):
    name = f"{E0}.up_proj.weight_scale"
    f = copy(tmp_path, "llmcompressor", "nvfp4", tensors=_set_byte(name, 3, 1, 0x7F))
    check_refuses(f, capsys, name, "expert 0", "NaN", "row 3")


def test_negative_e4m3_block_scales_are_refused(tmp_path, capsys):
    name = "model.layers.1.mlp.experts.5.down_proj.weight_scale"

    def neg(t):
        v = t[name].view(torch.uint8).clone()
        v[:4] |= 0x80
        t[name] = v.view(torch.float8_e4m3fn)
    f = copy(tmp_path, "modelopt", "nvfp4", tensors=neg)
    check_refuses(f, capsys, name, "expert 5", "negative")


def test_e8m0_nan_block_scale_is_refused(tmp_path):
    name = f"{E0}.gate_proj.weight_scale"
    f = copy(tmp_path, "quark", "mxfp4", tensors=_set_byte(name, 0, 0, 0xFF))
    refused(f, name, "expert 0", "NaN")


def test_gptoss_e8m0_nan_block_scale_is_refused(tmp_path):
    name = "model.layers.2.mlp.experts.down_proj_scales"

    def nan(t):
        v = t[name].clone()
        v[6, 1, 0] = 0xFF
        t[name] = v
    f = copy(tmp_path, "gpt-oss", "mxfp4", tensors=nan)
    refused(f, name, "expert 6", "NaN")


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan")])
def test_modelopt_input_scale_must_be_finite_and_positive(tmp_path, capsys, value):
    name = "model.layers.1.mlp.experts.4.down_proj.input_scale"
    f = copy(tmp_path, "modelopt", "nvfp4", tensors=lambda t: t.update({name: torch.tensor(value)}))
    err = check_refuses(f, capsys, name, "expert 4", "input_scale", f"{value:g}")
    assert "weight_scale_2" not in err


@pytest.mark.parametrize("suffix", ["input_global_scale", "weight_global_scale"])
@pytest.mark.parametrize("value", [float("inf"), 0.0, -2.0, float("nan")])
def test_compressed_tensors_global_scales_must_be_finite_and_positive(tmp_path, capsys, suffix, value):
    name = f"model.layers.2.mlp.experts.3.up_proj.{suffix}"
    f = copy(tmp_path, "llmcompressor", "nvfp4", tensors=lambda t: t.update({name: torch.tensor([value])}))
    err = check_refuses(f, capsys, name, "expert 3", f"{value:g}")
    assert "differ" not in err  # not misreported as a gate/up disagreement


def test_modelopt_weight_scale_2_nan_is_named(tmp_path, capsys):
    name = f"{E0}.gate_proj.weight_scale_2"
    f = copy(tmp_path, "modelopt", "nvfp4", tensors=lambda t: t.update({name: torch.tensor(float("nan"))}))
    check_refuses(f, capsys, name, "expert 0", "nan")
