"""Bad input -> ValueError naming the problem."""
import math

import pytest
import torch

import harness.formats as hf


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
def test_k_not_multiple_of_block(fmt):
    B = hf.FORMATS[fmt].block_size
    with pytest.raises(ValueError, match=f"block size {B}"):
        hf.quantize(torch.zeros(2, B + 1), fmt)


def test_unknown_format_mode_rounding():
    x = torch.zeros(32)
    with pytest.raises(ValueError, match="unknown format 'mxfp5'"):
        hf.quantize(x, "mxfp5")
    with pytest.raises(ValueError, match="unknown scale_mode 'round'"):
        hf.quantize(x, "mxfp4", scale_mode="round")
    with pytest.raises(ValueError, match="unknown rounding 'nearest'"):
        hf.quantize(x, "mxfp4", rounding="nearest")
    with pytest.raises(ValueError, match="MX formats only"):
        hf.quantize(x, "nvfp4", scale_mode="ceil")
    with pytest.raises(ValueError, match="no global scale"):
        hf.quantize(x, "mxfp4", global_scale=2.0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.float64])
def test_unsupported_dtype(dtype):
    with pytest.raises(ValueError, match=str(dtype)):
        hf.quantize(torch.zeros(32, dtype=dtype), "mxfp4")


@pytest.mark.parametrize("gs", [0.0, -1.0, math.nan, math.inf, torch.tensor([1.0, -2.0])])
def test_bad_global_scale(gs):
    with pytest.raises(ValueError, match="global_scale must be finite and > 0"):
        hf.quantize(torch.zeros(2, 16), "nvfp4", global_scale=gs)


def test_dequantize_shape_mismatch():
    q = hf.quantize(torch.zeros(2, 64), "mxfp4")
    q.scales = q.scales[:, :1]
    with pytest.raises(ValueError, match="scales shape"):
        hf.dequantize(q)
