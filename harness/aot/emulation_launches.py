"""Every GPU launch of the emulation kernels (triton_src.py) that launch.py can
make, registered for the ahead-of-time compile check (harness.aot.registry).

Built from launch.py's own tile constants and constexpr helpers: a format in
the table, a scale mode, a rounding, an input dtype, the masked or unmasked
tail (EVEN), a scalar or per-row global scale, packed or unpacked fp4.
Interpreter-only constexprs (BF16_BY_BITS) are False on a GPU; the launches
are the same on every backend.
"""
from __future__ import annotations

import torch

from harness.formats import FLOAT_DTYPES, FORMAT_NAMES, ROUNDINGS, get_format

from harness.kernels import launch
from harness.kernels.loader import kernels
from harness.aot.registry import Variant, register, bind

TRITON_TYPE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.uint8: "u8",
               torch.int32: "i32", torch.int64: "i64"}
_DT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def ptr(dtype) -> str:
    return "*" + TRITON_TYPE[dtype]


def _modes(spec):
    """(scale_mode, rounding) pairs a caller may pass (two-level rows have no scale mode)."""
    return [(m, r) for m in spec.scale_modes for r in ROUNDINGS]


def _gs(spec, dummy_dtype):
    """(gs pointer type, per-row flag) choices of launch._gs_args: MX passes a
    dummy tensor; nvfp4 a float32 scale, scalar or per row."""
    if spec.is_mx:
        return [(ptr(dummy_dtype), False)]
    return [("*fp32", False), ("*fp32", True)]


def _label(*parts, even, per_row):
    return ".".join(str(p) for p in parts) + (".even" if even else ".masked") + (".gs_rows" if per_row else "")


def _variant(kernel, config, types, consts, num_warps=launch.GPU_NUM_WARPS):
    sig, consts = bind(kernel, types, consts)
    return Variant(config, sig, consts, dict(num_warps=num_warps, **launch.GPU_OPTIONS))


def qdq_variants(backend=None):
    k = kernels(False).qdq_kernel
    for fmt in FORMAT_NAMES:
        spec = get_format(fmt)
        bpp = launch.tile(1, spec.block_size, False)
        for mode, rnd in _modes(spec):
            for dt in FLOAT_DTYPES:
                for gs_t, per_row in _gs(spec, dt):
                    for even in (True, False):
                        types = dict(x_ptr=ptr(dt), y_ptr=ptr(dt), gs_ptr=gs_t, n_blocks="i32", blocks_per_gs="i32")
                        consts = launch.qdq_constants(fmt, mode, rnd, bpp, even, per_row, False)
                        yield _variant(k, _label(fmt, mode, rnd, _DT[dt], even=even, per_row=per_row), types, consts)
                        # api.qdq's bf16_operand: MX, a float32 / float16 x's QDQ written in bf16 (a bf16 x's is
                        # the launch above); two-level (one global scale), bf16(qdq(x) * gs) from any x
                        scale_out = spec.has_global_scale and not per_row
                        if scale_out or (spec.is_mx and dt != torch.bfloat16):
                            types = dict(types, y_ptr=ptr(torch.bfloat16))
                            consts = launch.qdq_constants(fmt, mode, rnd, bpp, even, per_row, False, scale_out)
                            name = _label(fmt, mode, rnd, _DT[dt], "bf16_operand", even=even, per_row=per_row)
                            yield _variant(k, name, types, consts)


def _quantize_variants(packed: bool, backend=None):
    k = kernels(False).quantize_packed_kernel if packed else kernels(False).quantize_kernel
    bpp, tpp = launch.GPU_QUANT_TILE_BLOCKS, launch.GPU_QUANT_TPP
    for fmt in FORMAT_NAMES:
        spec = get_format(fmt)
        if packed and not spec.is_fp4:
            continue
        for mode, rnd in _modes(spec):
            for dt in FLOAT_DTYPES:
                for gs_t, per_row in _gs(spec, dt):
                    for even in (True, False):
                        if packed:
                            word, kind = launch._PAIR_VIEW[dt]
                            consts = launch.quantize_constants(fmt, mode, rnd, bpp, even, per_row, tpp, in_kind=kind)
                            first = dict(w_ptr=ptr(word))
                        else:
                            consts = launch.quantize_constants(fmt, mode, rnd, bpp, even, per_row, tpp)
                            first = dict(x_ptr=ptr(dt))
                        types = dict(first, c_ptr="*u8", s_ptr="*u8", gs_ptr=gs_t, n_blocks="i32",
                                     blocks_per_gs="i32")
                        yield _variant(k, _label(fmt, mode, rnd, _DT[dt], even=even, per_row=per_row), types, consts)


def dequantize_variants(backend=None):
    k = kernels(False).dequantize_kernel
    for fmt in FORMAT_NAMES:
        spec = get_format(fmt)
        bpp = launch.tile(1, spec.block_size, False)
        for packed in ((False, True) if spec.is_fp4 else (False,)):
            for dt in FLOAT_DTYPES:
                for gs_t, per_row in _gs(spec, torch.uint8):  # MX: the scales tensor is the dummy
                    for even in (True, False):
                        types = dict(c_ptr="*u8", s_ptr="*u8", gs_ptr=gs_t, y_ptr=ptr(dt), n_blocks="i32",
                                     blocks_per_gs="i32")
                        consts = launch.dequantize_constants(fmt, bpp, even, per_row, packed, False)
                        name = _label(fmt, "packed" if packed else "codes", _DT[dt], even=even, per_row=per_row)
                        yield _variant(k, name, types, consts)


register("qdq_kernel", lambda: kernels(False).qdq_kernel, qdq_variants)
register("quantize_kernel", lambda: kernels(False).quantize_kernel, lambda b: _quantize_variants(False, b))
register("quantize_packed_kernel", lambda: kernels(False).quantize_packed_kernel, lambda b: _quantize_variants(True, b))
register("dequantize_kernel", lambda: kernels(False).dequantize_kernel, dequantize_variants)
