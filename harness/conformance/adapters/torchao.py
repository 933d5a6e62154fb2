"""torchao's prototype MX and NVFP4 formats (torchao.prototype.mx_formats):
`to_mx` / `to_dtype` (what MXTensor.to_mx and MXTensor.dequantize call) and
`nvfp4_quantize` / NVFP4Tensor. Eager torch paths; inputs float32 / bfloat16."""
from __future__ import annotations

import torch

import harness.formats as hf

from harness.conformance.protocol import Implementation, Unavailable


def _torchao():
    try:
        import torchao
        from torchao.prototype.mx_formats import constants, mx_tensor, nvfp4_tensor
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
    except ImportError as e:
        raise Unavailable(f"torchao (prototype.mx_formats) does not import: {e}") from None
    return torchao, constants, mx_tensor, nvfp4_tensor, ScaleCalculationMode


def element_dtype(spec, constants):
    """torchao's element dtype of a format row (its element's torchao_dtype, an
    attribute of torch or of torchao's mx_formats constants), or None."""
    name = spec.element.torchao_dtype
    if name is None:
        return None
    return getattr(torch, name, None) or getattr(constants, name)


def _elem_dtypes(constants):
    """MX format name -> torchao element dtype, for the rows torchao has one for."""
    found = {name: element_dtype(f, constants) for name, f in hf.FORMATS.items() if f.is_mx}
    return {name: dt for name, dt in found.items() if dt is not None}


def torchao_mx() -> Implementation:
    torchao, constants, mx_tensor, _, SCM = _torchao()
    elem = _elem_dtypes(constants)

    def quantize(x, fmt, mode, rounding, gs):
        spec = hf.FORMATS[fmt]
        scale, data = mx_tensor.to_mx(x.contiguous(), elem[fmt], spec.block_size, getattr(SCM, mode.upper()))
        codes = data.view(torch.uint8)
        if spec.is_fp4:
            codes = hf.unpack_fp4(codes)
        return codes.reshape(x.shape), scale.view(torch.uint8).reshape(*x.shape[:-1], -1)

    def dequantize(codes, scales, fmt, gs, dtype):
        spec = hf.FORMATS[fmt]
        data = hf.pack_fp4(codes) if spec.is_fp4 else codes
        if elem[fmt] in (torch.float8_e4m3fn, torch.float8_e5m2):
            data = data.view(elem[fmt])
        out = mx_tensor.to_dtype(data, scales.view(torch.float8_e8m0fnu), elem[fmt], spec.block_size, dtype)
        return out.reshape(codes.shape)

    def qdq(x, fmt, mode, rounding, gs):
        c, s = quantize(x, fmt, mode, rounding, gs)
        return dequantize(c, s, fmt, gs, x.dtype)

    return Implementation(
        name="torchao-mx", version=torchao.__version__.split("+")[0], formats=tuple(elem),
        scale_modes=hf.SCALE_MODES, roundings=("rne",), input_dtypes=(torch.float32, torch.bfloat16),
        output_dtypes=(torch.float32, torch.bfloat16), devices=("cpu", "cuda"),
        conventions={"global_scale": "none", "scale_dtype": "float8_e8m0fnu", "packing": "fp4 two per byte, low nibble first"},
        quantize=quantize, dequantize=dequantize, qdq=qdq)


def torchao_nvfp4() -> Implementation:
    torchao, _, _, nv, _ = _torchao()
    fmt_names = tuple(n for n, f in hf.FORMATS.items() if f.has_global_scale)

    def _pts(gs, device):
        return None if gs is None else torch.tensor(gs, dtype=torch.float32, device=device)

    def quantize(x, fmt, mode, rounding, gs):
        scales, packed = nv.nvfp4_quantize(x.contiguous(), hf.FORMATS[fmt].block_size, _pts(gs, x.device))
        return hf.unpack_fp4(packed.view(torch.uint8)).reshape(x.shape), scales.view(torch.uint8).reshape(*x.shape[:-1], -1)

    def dequantize(codes, scales, fmt, gs, dtype):
        t = nv.NVFP4Tensor(hf.pack_fp4(codes), scales.view(torch.float8_e4m3fn), hf.FORMATS[fmt].block_size,
                           dtype, _pts(gs, codes.device))
        return t.dequantize(dtype)

    def qdq(x, fmt, mode, rounding, gs):
        t = nv.NVFP4Tensor.to_nvfp4(x.contiguous(), hf.FORMATS[fmt].block_size, _pts(gs, x.device))
        return t.dequantize(x.dtype)

    # per_tensor_scale is decode-side (amax / (448 * 6)); None means single-level scaling.
    return Implementation(
        name="torchao-nvfp4", version=torchao.__version__.split("+")[0], formats=fmt_names, scale_modes=("floor",),
        roundings=("rne",), input_dtypes=(torch.float32, torch.bfloat16),
        output_dtypes=(torch.float32, torch.bfloat16), devices=("cpu", "cuda"),
        conventions={"global_scale": "decode", "scale_dtype": "float8_e4m3fn", "packing": "fp4 two per byte, low nibble first"},
        quantize=quantize, dequantize=dequantize, qdq=qdq)
