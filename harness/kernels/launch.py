"""Host side of the Triton kernels: flatten, size the tiles, launch.

Inputs here are already validated and normalised by harness.kernels.api:
x [..., K] contiguous, global scale None or float32 [G] on x's device
(row r of the flattened leading dims uses gs[r // (rows / G)]). No function
here reads a tensor's value on the host, so all of them can be captured in a
CUDA graph.
"""
from __future__ import annotations

import torch

from harness.formats import get_format

from harness.kernels.constants import kernel_constants
from harness.kernels.loader import kernels

# GPU tile: elements per program and warps (bench.py --sweep measures others).
GPU_TILE_ELEMS = 2048
GPU_NUM_WARPS = 4
# Quantize kernels: quantization blocks per tile and tiles per program (each
# program loads its next tile before working on the current one). Measured on
# an H200 (docs/benchmarks.md): 128 blocks x 2 tiles is the best or within 1%
# of it for nvfp4 (2048-element tiles) and mxfp4 (4096) alike.
GPU_QUANT_TILE_BLOCKS = 128
GPU_QUANT_TPP = 2
# Interpreter: one numpy pass per program, so few, large programs.
INTERP_MAX_BPP = 256
# Compile options of every GPU launch: no FMA contraction, so every float op
# rounds exactly like the reference.
GPU_OPTIONS = dict(enable_fp_fusion=False)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def tile(n_blocks: int, block: int, interpret: bool, tile_elems: int | None = None) -> int:
    """Blocks per program (a power of two)."""
    if tile_elems:
        return max(1, tile_elems // block)
    if interpret:
        return max(1, min(_next_pow2(n_blocks), INTERP_MAX_BPP))
    return max(1, GPU_TILE_ELEMS // block)


def run_kernel(kernel, grid, args: tuple, kwargs: dict, interpret: bool) -> None:
    """kernel[grid](*args, **kwargs); in the interpreter with numpy's
    floating-point warnings off (IEEE results, overflow to Inf included, are
    wanted: the warnings are noise)."""
    if interpret:
        import numpy as np

        with np.errstate(all="ignore"):
            kernel[grid](*args, **kwargs)
    else:
        kernel[grid](*args, **kwargs)


def _launch(kernel, n_blocks: int, bpp: int, args: tuple, consts: dict, interpret: bool, num_warps=None):
    names = set(kernel.arg_names)
    kw = {k: v for k, v in consts.items() if k in names}
    grid = (triton_cdiv(n_blocks, bpp * kw.get("TPP", 1)),)
    if not interpret:
        kw.update(num_warps=num_warps or GPU_NUM_WARPS, **GPU_OPTIONS)
    run_kernel(kernel, grid, args, kw, interpret)


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# Constexprs of each kernel's launch (the ahead-of-time check, launch_aot.py, uses the same).


def qdq_constants(fmt, scale_mode, rounding, bpp, even, per_row, bf16_by_bits, scale_out=False) -> dict:
    return dict(kernel_constants(fmt, scale_mode, rounding), BPP=bpp, EVEN=even, GS_PER_ROW=per_row,
                BF16_BY_BITS=bf16_by_bits, SCALE_OUT=scale_out)


def quantize_constants(fmt, scale_mode, rounding, bpp, even, per_row, tpp, *, in_kind=None,
                       bf16_by_bits=False) -> dict:
    """quantize_packed_kernel's when in_kind is given, else quantize_kernel's."""
    consts = dict(kernel_constants(fmt, scale_mode, rounding), BPP=bpp, EVEN=even, GS_PER_ROW=per_row, TPP=tpp)
    if in_kind is None:
        consts["BF16_BY_BITS"] = bf16_by_bits
    else:
        consts["IN_KIND"] = in_kind
    return consts


def dequantize_constants(fmt, bpp, even, per_row, packed, bf16_by_bits) -> dict:
    return dict(kernel_constants(fmt), BPP=bpp, EVEN=even, GS_PER_ROW=per_row, PACKED=packed,
                BF16_BY_BITS=bf16_by_bits)


def _gs_args(gs, n_blocks: int, dummy: torch.Tensor, spec):
    """(pointer tensor, blocks per gs entry, per-row flag) for a kernel launch.
    nvfp4 without a global scale uses 1.0, as the reference does."""
    if gs is None:
        if spec.is_mx:
            return dummy, 1, False
        gs = torch.ones(1, dtype=torch.float32, device=dummy.device)
    groups = gs.numel()
    if groups <= 1:
        return gs, 1, False
    return gs, max(1, n_blocks // groups), True


def qdq(x: torch.Tensor, gs, fmt: str, scale_mode: str, rounding: str, *, scale_out: bool = False,
        out_dtype=None, tile_elems=None, num_warps=None):
    """QDQ of x, computed in float32, written in out_dtype (default x's
    dtype: one rounding); with scale_out (api.qdq checks it is a two-level
    format with one global scale) fl(qdq(x) * gs) instead."""
    spec = get_format(fmt)
    interpret = x.device.type == "cpu"
    y = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
    n_blocks = x.numel() // spec.block_size
    if n_blocks == 0:
        return y
    bpp = tile(n_blocks, spec.block_size, interpret, tile_elems)
    gs_t, per_gs, per_row = _gs_args(gs, n_blocks, x, spec)
    consts = qdq_constants(spec.name, scale_mode, rounding, bpp, n_blocks % bpp == 0, per_row,
                           interpret and torch.bfloat16 in (x.dtype, y.dtype), scale_out)
    k = kernels(interpret).qdq_kernel
    _launch(k, n_blocks, bpp, (x, y, gs_t, n_blocks, per_gs), consts, interpret, num_warps)
    return y


_PAIR_VIEW = {torch.bfloat16: (torch.int32, 0), torch.float16: (torch.int32, 1), torch.float32: (torch.int64, 2)}


def quantize(x: torch.Tensor, gs, fmt: str, scale_mode: str, rounding: str, pack: bool, *, tile_elems=None,
             num_warps=None, tiles_per_program=None):
    """(codes, scales): fp4 codes packed two per byte when `pack`, else one per byte."""
    spec = get_format(fmt)
    interpret = x.device.type == "cpu"
    K = x.shape[-1]
    pack = bool(pack) and spec.is_fp4
    codes = torch.empty(*x.shape[:-1], K // 2 if pack else K, dtype=torch.uint8, device=x.device)
    scales = torch.empty(*x.shape[:-1], K // spec.block_size, dtype=torch.uint8, device=x.device)
    n_blocks = x.numel() // spec.block_size
    if n_blocks == 0:
        return codes, scales
    if tile_elems is None and not interpret:
        tile_elems = GPU_QUANT_TILE_BLOCKS * spec.block_size
    bpp = tile(n_blocks, spec.block_size, interpret, tile_elems)
    tpp = tiles_per_program or (1 if interpret else GPU_QUANT_TPP)
    gs_t, per_gs, per_row = _gs_args(gs, n_blocks, x, spec)
    even = n_blocks % (bpp * tpp) == 0
    if pack:
        word, kind = _PAIR_VIEW[x.dtype]
        if x.data_ptr() % (2 * x.element_size()):  # a view starting at an odd element
            x = x.clone()
        consts = quantize_constants(spec.name, scale_mode, rounding, bpp, even, per_row, tpp, in_kind=kind)
        k = kernels(interpret).quantize_packed_kernel
        args = (x.view(word), codes, scales, gs_t, n_blocks, per_gs)
    else:
        consts = quantize_constants(spec.name, scale_mode, rounding, bpp, even, per_row, tpp,
                                    bf16_by_bits=interpret and x.dtype == torch.bfloat16)
        k = kernels(interpret).quantize_kernel
        args = (x, codes, scales, gs_t, n_blocks, per_gs)
    _launch(k, n_blocks, bpp, args, consts, interpret, num_warps)
    return codes, scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, gs, fmt: str, packed: bool, dtype: torch.dtype, *,
               tile_elems=None, num_warps=None):
    spec = get_format(fmt)
    interpret = codes.device.type == "cpu"
    K = scales.shape[-1] * spec.block_size
    y = torch.empty(*codes.shape[:-1], K, dtype=dtype, device=codes.device)
    n_blocks = scales.numel()
    if n_blocks == 0:
        return y
    bpp = tile(n_blocks, spec.block_size, interpret, tile_elems)
    gs_t, per_gs, per_row = _gs_args(gs, n_blocks, scales, spec)
    consts = dequantize_constants(spec.name, bpp, n_blocks % bpp == 0, per_row, bool(packed),
                                  interpret and dtype == torch.bfloat16)
    k = kernels(interpret).dequantize_kernel
    _launch(k, n_blocks, bpp, (codes, scales, gs_t, y, n_blocks, per_gs), consts, interpret, num_warps)
    return y
