"""vLLM's NVFP4 / MX emulation functions, imported from an installed `vllm`
(vllm.model_executor.layers.quantization.utils; no vLLM code is copied).

CPU torch paths (run here):
    vllm-nvfp4-ref      ref_nvfp4_quant (quantize) and ref_nvfp4_quant_dequant
                        (qdq; its torch path off CUDA), encode-side global scale
    vllm-nvfp4-dequant  dequantize_to_dtype(swizzle=False): the compressed-tensors
                        and ModelOpt loading path, multiplying by a stored
                        decode-side 1/gs (run also with gs = 3, whose 1/gs is
                        inexact in float32)
    vllm-mxfp8-torch    _mxfp8_e4m3_quantize_torch (RCEIL, E4M3 elements)
    vllm-reference-mxfp4  tests/quantization/reference_mxfp4.py qdq_mxfp4_torch
                        (the torch port of Quark's MXFP4), loaded from a vLLM
                        source tree named by MOE_HARNESS_VLLM_SOURCE
CUDA Triton kernels (`--device cuda`; vLLM selects them on a CUDA platform):
    vllm-triton-nvfp4   _nvfp4_quant_dequant_kernel (qdq)
    vllm-triton-mxfp4   downcast_to_mxfp (quantize; mode even)

A bare `pip install --no-deps vllm pyzmq` is enough for these modules: the
C extensions are never loaded by them (docs/conformance.md).
"""
from __future__ import annotations

import torch

import harness.formats as hf
from harness.formats import minifloat

from harness.conformance.protocol import Implementation, Unavailable

_UTILS = "vllm.model_executor.layers.quantization.utils"
# gs = 3: fl(1/3) is inexact, so a decode-side multiplier differs from s / gs.
DECODE_SIDE_GLOBAL_SCALES = (1.0, 16.0, 3.0)


def _vllm(module: str):
    try:
        import importlib

        import vllm

        return vllm.__version__.split("+")[0], importlib.import_module(f"{_UTILS}.{module}")
    except (ImportError, OSError) as e:  # OSError: a shared library of vLLM's that does not load here
        raise Unavailable(f"vllm ({_UTILS}.{module}) does not import: {e}") from None


def _nvfp4_names():
    return tuple(n for n, f in hf.FORMATS.items() if f.has_global_scale and f.block_size == 16)


def _gs_tensor(gs, device):
    return torch.tensor([1.0 if gs is None else gs], dtype=torch.float32, device=device)


def _rows(x):
    return x.reshape(-1, x.shape[-1])


def vllm_nvfp4_ref() -> Implementation:
    version, nv = _vllm("nvfp4_emulation_utils")

    def quantize(x, fmt, mode, rounding, gs):
        vals, scale = nv.ref_nvfp4_quant(_rows(x), _gs_tensor(gs, x.device), hf.FORMATS[fmt].block_size)
        # vals are exact E2M1 values in float32; the scale float32 values of E4M3 codes.
        codes = minifloat.encode(hf.FORMATS[fmt].element, vals.to(torch.float32).cpu())
        return codes.reshape(x.shape), scale.to(torch.float8_e4m3fn).view(torch.uint8).reshape(*x.shape[:-1], -1)

    def qdq(x, fmt, mode, rounding, gs):
        if x.is_cuda:  # on a CUDA platform vLLM routes this call to its Triton kernel
            raise RuntimeError("vllm-nvfp4-ref is the CPU torch path; use vllm-triton-nvfp4 on CUDA")
        return nv.ref_nvfp4_quant_dequant(_rows(x), _gs_tensor(gs, x.device),
                                          hf.FORMATS[fmt].block_size).reshape(x.shape)

    return Implementation(
        name="vllm-nvfp4-ref", version=version, formats=_nvfp4_names(), scale_modes=("floor",),
        roundings=("rne",), devices=("cpu",),
        conventions={"global_scale": "encode", "scale_dtype": "float32 (E4M3 values)", "packing": "unpacked values"},
        quantize=quantize, qdq=qdq)


def vllm_nvfp4_dequant() -> Implementation:
    version, nv = _vllm("nvfp4_emulation_utils")

    def dequantize(codes, scales, fmt, gs, dtype):
        packed = hf.pack_fp4(_rows(codes))
        out = nv.dequantize_to_dtype(packed, _rows(scales).view(torch.float8_e4m3fn), _gs_tensor(gs, codes.device),
                                     dtype, block_size=hf.FORMATS[fmt].block_size, swizzle=False)
        return out.reshape(codes.shape)

    return Implementation(
        name="vllm-nvfp4-dequant", version=version, formats=_nvfp4_names(), scale_modes=("floor",),
        roundings=("rne",), devices=("cpu",), global_scales=DECODE_SIDE_GLOBAL_SCALES,
        conventions={"global_scale": "decode", "scale_dtype": "float8_e4m3fn", "packing": "fp4 two per byte, low nibble first"},
        dequantize=dequantize)


def vllm_mxfp8_torch() -> Implementation:
    version, m = _vllm("mxfp8_utils")
    fmts = tuple(n for n, f in hf.FORMATS.items()
                 if f.is_mx and (f.ebits, f.mbits) == (4, 3) and f.block_size == m.MXFP8_BLOCK_SIZE)

    def quantize(x, fmt, mode, rounding, gs):
        q, s = m._mxfp8_e4m3_quantize_torch(_rows(x))
        return q.view(torch.uint8).reshape(x.shape), s.reshape(*x.shape[:-1], -1)

    return Implementation(
        name="vllm-mxfp8-torch", version=version, formats=fmts, scale_modes=("rceil",), roundings=("rne",),
        devices=("cpu", "cuda"),
        conventions={"global_scale": "none", "scale_dtype": "uint8 (E8M0 bytes)", "packing": "float8_e4m3fn"},
        quantize=quantize)


def _cuda_only(name):
    if not torch.cuda.is_available():
        raise Unavailable("vLLM's Triton kernels run on a CUDA device; none here (torch.cuda.is_available() is False)")


def vllm_triton_nvfp4() -> Implementation:
    _cuda_only("vllm-triton-nvfp4")
    version, nv = _vllm("nvfp4_emulation_utils")

    def qdq(x, fmt, mode, rounding, gs):
        return nv._triton_nvfp4_quant_dequant(_rows(x).contiguous(), _gs_tensor(gs, x.device),
                                              hf.FORMATS[fmt].block_size).reshape(x.shape)

    return Implementation(
        name="vllm-triton-nvfp4", version=version, formats=_nvfp4_names(), scale_modes=("floor",),
        roundings=("rne",), input_dtypes=(torch.float32, torch.bfloat16, torch.float16), devices=("cuda",),
        conventions={"global_scale": "encode", "scale_dtype": "float8_e4m3fn", "packing": "none (qdq)"},
        qdq=qdq)


def vllm_triton_mxfp4() -> Implementation:
    _cuda_only("vllm-triton-mxfp4")
    version, mx = _vllm("mxfp4_utils")
    fmts = tuple(n for n, f in hf.FORMATS.items() if f.is_mx and f.is_fp4 and f.block_size == 32)

    def quantize(x, fmt, mode, rounding, gs):
        packed, scales, _ = mx.downcast_to_mxfp(_rows(x).contiguous(), axis=-1)  # (+ the scale shape)
        return hf.unpack_fp4(packed.view(torch.uint8)).reshape(x.shape), scales.reshape(*x.shape[:-1], -1)

    return Implementation(
        name="vllm-triton-mxfp4", version=version, formats=fmts, scale_modes=("even",), roundings=("rne",),
        input_dtypes=(torch.bfloat16, torch.float16), devices=("cuda",),  # the kernel asserts bf16 / fp16 input
        conventions={"global_scale": "none", "scale_dtype": "uint8 (E8M0 bytes)",
                     "packing": "fp4 two per byte, low nibble first"},
        quantize=quantize)


# The torch port of Quark's MXFP4 that vLLM's tests compare against ships in
# vLLM's source tree (tests/), not in the installed package.
SOURCE_ENV = "MOE_HARNESS_VLLM_SOURCE"
_REFERENCE_MXFP4 = ("tests", "quantization", "reference_mxfp4.py")


def vllm_reference_mxfp4() -> Implementation:
    import importlib.util
    import os
    from pathlib import Path

    root = os.environ.get(SOURCE_ENV)
    if not root:
        raise Unavailable(f"vLLM's {'/'.join(_REFERENCE_MXFP4)} is test code outside the installed package; "
                          f"set {SOURCE_ENV} to a vLLM source tree (a checkout or the unpacked sdist)")
    path = Path(root).joinpath(*_REFERENCE_MXFP4)
    if not path.is_file():
        raise Unavailable(f"{SOURCE_ENV}={root}: no {'/'.join(_REFERENCE_MXFP4)} there")
    spec = importlib.util.spec_from_file_location("vllm_tests_reference_mxfp4", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        import vllm

        version = vllm.__version__.split("+")[0]
    except ImportError:
        version = "unversioned"  # the source tree alone; registry entries then do not apply
    fmts = tuple(n for n, f in hf.FORMATS.items() if f.is_mx and f.is_fp4 and f.block_size == 32)

    def qdq(x, fmt, mode, rounding, gs):
        return mod.qdq_mxfp4_torch(x, scale_calculation_mode=mode)

    return Implementation(
        name="vllm-reference-mxfp4", version=version, formats=fmts, scale_modes=("even",), roundings=("rne",),
        input_dtypes=(torch.bfloat16, torch.float16), output_dtypes=(torch.bfloat16, torch.float16),
        devices=("cpu", "cuda"), conventions={"global_scale": "none", "scale_dtype": "input dtype (fake quantization)",
                                              "packing": "none"},
        qdq=qdq)
