"""compressed-tensors NVFP4 (the preset scheme NVFP4["weights"]): block scales
from calculate_qparams, codes from lifecycle.forward.quantize, values from
dequantize / fake_quantize. global_scale is encode-side (448 * 6 / amax)."""
from __future__ import annotations

import torch

import harness.formats as hf
from harness.formats import minifloat

from harness.conformance.protocol import Implementation, Unavailable


def compressed_tensors_nvfp4() -> Implementation:
    try:
        import compressed_tensors
        from compressed_tensors.quantization.lifecycle import forward
        from compressed_tensors.quantization.quant_scheme import NVFP4
        from compressed_tensors.quantization.utils.helpers import calculate_qparams
    except ImportError as e:
        raise Unavailable(f"compressed-tensors does not import: {e}") from None
    args = NVFP4["weights"]
    fmt_names = tuple(n for n, f in hf.FORMATS.items() if f.has_global_scale and f.block_size == args.group_size)

    def _gs(gs, device):
        return torch.tensor([1.0 if gs is None else gs], dtype=torch.float32, device=device)

    def _qparams(x, fmt, gs):
        xb = x.reshape(*x.shape[:-1], -1, hf.FORMATS[fmt].block_size).to(torch.float32)
        return calculate_qparams(xb.amin(-1), xb.amax(-1), args, global_scale=_gs(gs, x.device))

    def quantize(x, fmt, mode, rounding, gs):
        scale, zp = _qparams(x, fmt, gs)
        q = forward.quantize(x.to(torch.float32), scale, zp, args, global_scale=_gs(gs, x.device))
        codes = minifloat.encode(hf.FORMATS[fmt].element, q.to(torch.float32))  # q holds exact E2M1 values
        return codes, scale.to(torch.float8_e4m3fn).view(torch.uint8)

    def dequantize(codes, scales, fmt, gs, dtype):
        vals = minifloat.decode(hf.FORMATS[fmt].element, codes)
        s = scales.view(torch.float8_e4m3fn).to(torch.float32)
        return forward.dequantize(vals, s, None, args, dtype=dtype, global_scale=_gs(gs, codes.device))

    def qdq(x, fmt, mode, rounding, gs):
        scale, zp = _qparams(x, fmt, gs)
        return forward.fake_quantize(x, scale, zp, args, global_scale=_gs(gs, x.device)).to(x.dtype)

    return Implementation(
        name="compressed-tensors-nvfp4", version=compressed_tensors.__version__, formats=fmt_names,
        scale_modes=("floor",), roundings=("rne",), input_dtypes=(torch.float32, torch.bfloat16, torch.float16),
        output_dtypes=(torch.float32, torch.bfloat16, torch.float16), devices=("cpu", "cuda"),
        conventions={"global_scale": "encode", "scale_dtype": "float8_e4m3fn", "packing": "unpacked values"},
        quantize=quantize, dequantize=dequantize, qdq=qdq)
