"""NVIDIA ModelOpt's NVFP4 (nvidia-modelopt, imported; no code copied).

    modelopt-nvfp4       NVFP4QTensor.quantize / dequantize: the pure-torch real
                         quantization its export writes (CPU and CUDA);
                         weights_scaling_factor_2 is the decode-side global
                         scale amax / (6 * 448)
    modelopt-nvfp4-fake  tensor_quant.dynamic_block_quant with num_bits (2, 1)
                         and scale_bits (4, 3): the fake quantization used
                         during calibration / QAT. CUDA only: it asserts
                         amax.is_cuda and runs a Triton kernel or the CUDA
                         extension, so it is skipped without a CUDA device.
"""
from __future__ import annotations

import torch

import harness.formats as hf

from harness.conformance.protocol import Implementation, Unavailable

# NVFP4's global scale maps the tensor amax to 6 * 448.
_E2M1_X_E4M3_MAX = 6.0 * 448.0


def _modelopt():
    try:
        import modelopt
        from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
    except ImportError as e:
        raise Unavailable(f"nvidia-modelopt (modelopt.torch.quantization) does not import: {e}") from None
    return modelopt.__version__.split("+")[0], NVFP4QTensor


def _nvfp4_names():
    return tuple(n for n, f in hf.FORMATS.items() if f.has_global_scale)


def modelopt_nvfp4() -> Implementation:
    version, Q = _modelopt()

    def _decode_gs(gs, device):
        return torch.tensor(1.0 if gs is None else gs, dtype=torch.float32, device=device)

    def quantize(x, fmt, mode, rounding, gs):
        q, s, _ = Q.quantize(x, hf.FORMATS[fmt].block_size, weights_scaling_factor_2=_decode_gs(gs, x.device))
        codes = hf.unpack_fp4(q._quantized_data.view(torch.uint8)).reshape(x.shape)
        return codes, s.view(torch.uint8).reshape(*x.shape[:-1], -1)

    def dequantize(codes, scales, fmt, gs, dtype):
        spec = hf.FORMATS[fmt]
        q = Q(codes.shape, dtype, hf.pack_fp4(codes))
        return q.dequantize(dtype, scale=scales.view(torch.float8_e4m3fn), double_scale=_decode_gs(gs, codes.device),
                            block_sizes={-1: spec.block_size})

    def qdq(x, fmt, mode, rounding, gs):
        spec = hf.FORMATS[fmt]
        q, s, s2 = Q.quantize(x, spec.block_size, weights_scaling_factor_2=_decode_gs(gs, x.device))
        return q.dequantize(x.dtype, scale=s, double_scale=s2, block_sizes={-1: spec.block_size})

    return Implementation(
        name="modelopt-nvfp4", version=version, formats=_nvfp4_names(), scale_modes=("floor",), roundings=("rne",),
        devices=("cpu", "cuda"),
        conventions={"global_scale": "decode", "scale_dtype": "float8_e4m3fn", "packing": "fp4 two per byte, low nibble first"},
        quantize=quantize, dequantize=dequantize, qdq=qdq)


def modelopt_nvfp4_fake() -> Implementation:
    if not torch.cuda.is_available():
        raise Unavailable("ModelOpt's NVFP4 fake quantization (dynamic_block_quant, scale_bits (4, 3)) asserts "
                          "amax.is_cuda and runs a Triton kernel / CUDA extension; no CUDA device here")
    version, _ = _modelopt()
    from modelopt.torch.quantization.tensor_quant import dynamic_block_quant

    def qdq(x, fmt, mode, rounding, gs):
        amax = torch.tensor(_E2M1_X_E4M3_MAX / (1.0 if gs is None else gs), dtype=torch.float32, device=x.device)
        return dynamic_block_quant(x, hf.FORMATS[fmt].block_size, amax, None, (2, 1), (4, 3))

    return Implementation(
        name="modelopt-nvfp4-fake", version=version, formats=_nvfp4_names(), scale_modes=("floor",),
        roundings=("rne",), devices=("cuda",),
        conventions={"global_scale": "encode", "scale_dtype": "float8_e4m3fn (fake quantization)", "packing": "none"},
        qdq=qdq)
