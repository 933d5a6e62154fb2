"""Fused dequant + grouped GEMM for the expert GEMMs: the host code of the
kernel in fused_gemm_src.py (launch choice: launch_config.py; numerics
contract and error bound: error_bound.py; weights: fused_weights.py; pair
layout: pair_layout.py).

Modes (`moe_gemm(mode=...)`): "fused" decodes each weight tile inside the K
loop (once per BLOCK_M rows of its expert); "predequant" first writes the
weights once per forward to a scratch [E, N, K] (bf16 in precision "bf16",
exact by contract (2); float32 in "ieee") with the same kernel's dequant
path, then runs the grouped GEMM on it -- identical operand values, same
contract, and 2x faster when experts get hundreds of rows (Mixtral T=4096).
"auto" picks predequant on GPU from PREDEQUANT_MIN_ROWS_PER_EXPERT rows per
expert (launch_config.resolve_mode).

All pointer offsets are int64 (checked past 2^31 bytes of weights). CPU
tensors run the Triton interpreter: keep those shapes tiny.
"""
from __future__ import annotations

from typing import Optional

import torch

from harness.kernels import fused_act
from harness.kernels.error_bound import c_prec
from harness.kernels.fused_weights import FusedWeights
from harness.kernels.launch import run_kernel, triton_cdiv
from harness.kernels.launch_config import (ACT_CODES, ACT_NAMES, PREDEQUANT_MIN_ROWS_PER_EXPERT, act_constexprs,
                                           resolve_mode, select_launch, vendor_of)
from harness.kernels.loader import kernels
from harness.kernels.pair_layout import pair_layout
from harness.kernels.precision import PRECISIONS, RESOLVED_PRECISIONS, resolve_precision
from harness.kernels.split_k import sm_count

# What callers in harness.moe, harness.commands and harness.emulation reach
# through this module, the fused backend's entry point, beside moe_gemm.
__all__ = ["PRECISIONS", "PREDEQUANT_MIN_ROWS_PER_EXPERT", "FusedWeights", "c_prec", "fused_dequantize", "moe_gemm",
           "pair_layout", "resolve_precision"]


def _kernel(interpret: bool):
    """The grouped-GEMM kernel (fused_gemm_src.py): compiled, or the interpreter's copy."""
    return kernels(interpret, "fused_gemm_src")._moe_gemm_kernel


def moe_gemm(x: torch.Tensor, ids: torch.Tensor, fw: FusedWeights, *, precision: str = "ieee",
             a_gscale: Optional[torch.Tensor] = None, block_m: Optional[int] = None,
             config: Optional[dict] = None, mode: str = "auto", layout: Optional[tuple] = None,
             x_row_div: int = 1, bias: Optional[torch.Tensor] = None,
             row_scale: Optional[torch.Tensor] = None, x_scaled: bool = False, act: Optional[str] = None,
             act_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """See _moe_gemm_impl. Launched through the custom op moe_harness::moe_gemm,
    opaque to torch.compile (dynamo cannot trace Triton's launcher state), so
    compiled forwards keep one graph; a launch override `config` (tuning
    only: launch_config.select_launch's `override`) calls the implementation
    directly."""
    if config is not None:
        return _moe_gemm_impl(x, ids, fw, precision=precision, a_gscale=a_gscale, block_m=block_m,
                              config=config, mode=mode, layout=layout, x_row_div=x_row_div, bias=bias,
                              row_scale=row_scale, x_scaled=x_scaled, act=act, act_dtype=act_dtype)
    rows, block_expert, bm = layout if layout is not None else (None, None, block_m or 0)
    code = _act_code(act, act_dtype, fw.N)
    return _moe_gemm_op(x, ids, fw.data, fw.scales, fw.gscale, a_gscale, fw.kind,
                        fw.fmt or "", fw.E, fw.N, fw.K, precision, bm, mode, rows, block_expert, x_row_div,
                        bias, row_scale, fw.word_order, fw.plain_scales, bool(x_scaled), code,
                        act_dtype == torch.bfloat16, fw.k_over)


def _act_code(act: Optional[str], act_dtype: torch.dtype, n: int) -> int:
    """The kernel's activation code of `act` (None: 0), checked with its output dtype and the weights' N."""
    if act is None:
        return 0
    if act not in ACT_CODES:
        raise ValueError(f"moe_gemm act: unknown activation {act!r}; expected one of {', '.join(ACT_CODES)}")
    if act_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"moe_gemm act {act!r} writes float32 or bfloat16, got {act_dtype}")
    if n % 2:
        raise ValueError(f"moe_gemm act {act!r} needs weights of 2I rows (gate then up), got N={n}")
    return ACT_CODES[act]


@torch.library.custom_op("moe_harness::moe_gemm", mutates_args=())
def _moe_gemm_op(x: torch.Tensor, ids: torch.Tensor, data: torch.Tensor, scales: Optional[torch.Tensor],
                 gscale: Optional[torch.Tensor], a_gscale: Optional[torch.Tensor], kind: int, fmt: str, E: int,
                 N: int, K: int, precision: str, block_m: int, mode: str, rows: Optional[torch.Tensor] = None,
                 block_expert: Optional[torch.Tensor] = None, x_row_div: int = 1,
                 bias: Optional[torch.Tensor] = None, row_scale: Optional[torch.Tensor] = None,
                 word_order: str = "k", plain_scales: bool = False, x_scaled: bool = False, act: int = 0,
                 act_bf16: bool = False, k_over: int = 0) -> torch.Tensor:
    fw = FusedWeights(kind, data, scales, gscale, fmt or None, E, N, K, word_order)
    fw.plain_scales = plain_scales  # the flags of the FusedWeights moe_gemm took these tensors from
    fw.k_over = k_over
    layout = (rows, block_expert, block_m) if rows is not None else None
    name = ACT_NAMES.get(act)
    return _moe_gemm_impl(x, ids, fw, precision=precision, a_gscale=a_gscale, block_m=block_m or None, mode=mode,
                          layout=layout, x_row_div=x_row_div, bias=bias, row_scale=row_scale, x_scaled=x_scaled,
                          act=name, act_dtype=torch.bfloat16 if act_bf16 else torch.float32)


@_moe_gemm_op.register_fake
def _moe_gemm_fake(x, ids, data, scales, gscale, a_gscale, kind, fmt, E, N, K, precision, block_m, mode,
                   rows=None, block_expert=None, x_row_div=1, bias=None, row_scale=None, word_order="k",
                   plain_scales=False, x_scaled=False, act=0, act_bf16=False, k_over=0):
    if act:
        return x.new_empty((ids.shape[0], N // 2), dtype=torch.bfloat16 if act_bf16 else torch.float32)
    return x.new_empty((ids.shape[0], N), dtype=torch.float32)


# The split epilogue's launch constexprs and compile options (fused_launches.py compiles the same); no FMA
# contraction, so each operation rounds as torch's does.
SPLIT_SUM_META = dict(BLOCK=1024, num_warps=4, enable_fp_fusion=False)


def _moe_gemm_impl(x: torch.Tensor, ids: torch.Tensor, fw: FusedWeights, *, precision: str = "ieee",
                   a_gscale: Optional[torch.Tensor] = None, block_m: Optional[int] = None,
                   config: Optional[dict] = None, mode: str = "auto", layout: Optional[tuple] = None,
                   x_row_div: int = 1, bias: Optional[torch.Tensor] = None,
                   row_scale: Optional[torch.Tensor] = None, x_scaled: bool = False, act: Optional[str] = None,
                   act_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x [P / x_row_div, K] float32, ids [P] int64 expert of each pair -> [P,
    N] float32 = x[p // x_row_div] @ W[ids[p]].T (GEMM1 passes the tokens
    and top_k: no [P, K] copy of x); then, where given, + bias[ids[p]] (bias
    [E, N] float32) and * row_scale[p] (row_scale [P] float32), each one
    float32 operation with the bits of torch's `h + bias.index_select(0, ids)`
    and `h * row_scale[:, None]`: in the kernel's epilogue where the launch
    can (one K split; the bias not after a post factor), else in the
    split-sum pass after it (one launch). precision "bf16" with nvfp4 needs
    a_gscale (the encode-side global scale x was QDQ'd with). In precision
    "bf16" (no post factor) x may come as bfloat16, already the operand x
    rounds to: no conversion pass. x_scaled (nvfp4 in "bf16"): x is bfloat16
    already holding bf16(x_qdq * a_gscale), the operand this function would
    compute (the QDQ wrote it: harness.kernels.api.qdq's bf16_operand); a_gscale
    still gives the post factor. act (GEMM1, weights of N = 2I rows, gate
    then up; launch_config.ACT_CODES): returns [P, I] in act_dtype (float32
    or bfloat16) = act(gate, up) of that result, the bits of the activation
    pass (fused_act) on it rounded once to act_dtype: in the kernel's
    epilogue where the launch holds the bias and row scale (one split, the
    bias not after a post factor), else in the split-sum pass.

    mode "fused": dequant inside the GEMM's K loop (each weight tile is decoded
    once per BLOCK_M rows of its expert). "predequant": the same kernel's
    dequant path first writes the weights once into a scratch [E, N, K]
    (bf16 for precision "bf16" -- exact, see the contract -- else float32),
    then the grouped GEMM runs on it: identical operand values, so contract (2)
    holds unchanged; it pays off when experts get many rows. "auto": predequant
    on GPU when rows per expert >= PREDEQUANT_MIN_ROWS_PER_EXPERT, else fused."""
    if precision not in RESOLVED_PRECISIONS:
        raise ValueError(f"precision must be 'ieee' or 'bf16' here, got {precision!r}")
    K = x.shape[1]
    P = ids.shape[0]
    vendor = vendor_of(x.device)
    mode = resolve_mode(mode, vendor, fw.kind, P, fw.E)
    if K != fw.K:
        raise ValueError(f"x has K={K}, weights K={fw.K}")
    if not isinstance(x_row_div, int) or x_row_div < 1 or x.shape[0] * x_row_div != P:
        raise ValueError(f"x has {x.shape[0]} rows and x_row_div={x_row_div!r}: expected {P} pairs (ids) = rows x "
                         f"x_row_div")
    if bias is not None and (bias.dtype != torch.float32 or tuple(bias.shape) != (fw.E, fw.N)):
        raise ValueError(f"bias must be float32 [E, N] = [{fw.E}, {fw.N}], got {bias.dtype} {tuple(bias.shape)}")
    if row_scale is not None and (row_scale.dtype != torch.float32 or tuple(row_scale.shape) != (P,)):
        raise ValueError(f"row_scale must be float32 [P] = [{P}], got {row_scale.dtype} {tuple(row_scale.shape)}")
    code = _act_code(act, act_dtype, fw.N)
    n_out = fw.N // 2 if code else fw.N
    out = torch.empty(P, n_out, dtype=act_dtype if code else torch.float32, device=x.device)
    if P == 0:
        return out
    interpret = vendor == "interpreter"
    bf16 = precision == "bf16"
    two_level = fw.kind == 1 and fw.two_level
    post = bf16 and two_level  # 1/(gs_w[e] gs_a) after the dot
    if bf16 and interpret:
        # The Triton interpreter's dot on bf16 operands returns garbage (one-hot
        # rows gave 7.9e8 for weights of 0.06, triton 3.9); bf16 is a GPU path.
        raise ValueError("fused GEMM precision 'bf16' needs a CUDA/ROCm device: the Triton interpreter (CPU) does not "
                         "compute bf16 dots correctly; use precision 'ieee' (what 'auto' picks on CPU)")
    if code and act_dtype == torch.bfloat16 and interpret:
        # The interpreter rounds float32 to bf16 by truncation (1.8795 -> 1.875, not 1.8828; triton 3.9)
        raise ValueError("fused GEMM act_dtype bfloat16 needs a CUDA/ROCm device: the Triton interpreter (CPU) does "
                         "not round float32 to bf16 to nearest; use act_dtype float32 there")
    if x_scaled and (not post or x.dtype != torch.bfloat16):
        raise ValueError(f"x_scaled: x is bf16(x_qdq * a_gscale), the operand of a two-level format's GEMM in "
                         f"precision 'bf16'; got x {x.dtype} for {fw.fmt} in precision {precision!r}")
    scaled = x_scaled or (bf16 and not post and x.dtype == torch.bfloat16)
    xk = x if scaled else x.to(torch.float32)  # a bf16 x is the operand
    g = None
    if post:  # nvfp4: x * gs_a is exactly e2m1 * s in bf16
        if a_gscale is None:
            raise ValueError("nvfp4 fused GEMM in bf16 needs a_gscale")
        g = a_gscale.to(device=x.device, dtype=torch.float32).reshape(())
        if not x_scaled:  # one pass, the bits of (xk * g).to(bfloat16) (fused_act.scale_to_bf16)
            xk = fused_act.scale_to_bf16(xk, g)
        # the kernel applies fl(1 / gs_w[e]) * fl(1 / g) after the dot (no host launches)
    elif bf16:
        xk = xk.to(torch.bfloat16)
    xk = xk.contiguous()
    if K == 0:  # the empty sum: the kernel takes at least one K step (its tl.assume), so none is launched
        part = torch.zeros(1, P, fw.N, dtype=torch.float32, device=x.device)
        return _split_sum(part, out, ids, bias, row_scale, interpret, code)
    if layout is not None:  # (rows, block_expert, block_m) of pair_layout, shared by both GEMMs
        rows, block_expert, bm = layout
    else:
        rows, block_expert, bm = pair_layout(ids, fw.E, block_m=block_m)
    run_fw, launch = fw, "gemm"
    fw.check_over_read()  # a read past K only where the storage and the scales bear it
    if mode == "predequant" and fw.kind == 1:
        scratch = _dequantize(fw, torch.bfloat16 if bf16 else torch.float32)
        run_fw = FusedWeights(0, scratch, None, None, None, fw.E, fw.N, fw.K)
        launch = "scratch_gemm"
    cfg = select_launch(launch, vendor, kind=run_fw.kind, fmt=run_fw.fmt, bf16=bf16, has_post=post,
                        block_m=bm, n=fw.N, k=K, w_bytes=run_fw.data.element_size(), pairs=P, experts=fw.E,
                        sm_count=None if interpret else sm_count(x.device), bias=bias is not None,
                        row_scale=row_scale is not None, override=config, word_order=run_fw.word_order,
                        plain_scales=run_fw.plain_scales, scale_order=run_fw.scale_order or "k",
                        cuda_cc=torch.cuda.get_device_capability(x.device) if vendor == "cuda" else None, act=code,
                        k_read=run_fw.k_read)
    n_tiles = triton_cdiv(n_out, cfg.BLOCK_N // 2) if cfg.ACT else triton_cdiv(fw.N, cfg.BLOCK_N)
    splits = cfg.SPLIT_K
    # Split-K partials land in [splits, P, N] and are summed in split order
    # (_split_sum, no atomics: the same bits every run); contract (2)
    # bounds any summation order, so it covers the split sum too. HAS_POST
    # scales each partial: one rounding per split, inside c_prec (2^-7) of
    # the two-level rows that have a post factor.
    # what the launch leaves of the bias, row scale and activation the split-sum pass does, on the GEMM's [1, P,
    # N] float32 result (one launch where torch's index_select, add and multiply took three)
    direct = (splits == 1 and (cfg.ACT or not code) and (bias is None or cfg.HAS_BIAS)
              and (row_scale is None or cfg.ROW_SCALE))
    part = out if direct else torch.empty(splits, P, fw.N, dtype=torch.float32, device=x.device)
    grid = (block_expert.shape[0], n_tiles, splits)
    dummy = out
    sc = run_fw.scales
    bias_k = bias.contiguous() if cfg.HAS_BIAS else dummy
    rs_k = row_scale.contiguous() if cfg.ROW_SCALE else dummy
    args = (xk, rows, block_expert, run_fw.data, sc if sc is not None else dummy,
            fw.gscale if two_level else dummy, g.reshape(1) if g is not None else dummy, part, bias_k, rs_k,
            n_out if cfg.ACT else fw.N, K,
            xk.stride(0), part.stride(-2),
            run_fw.data.stride(0), run_fw.data.stride(1), sc.stride(0) if sc is not None else 0,
            sc.stride(1) if sc is not None else 0, sc.stride(2) if sc is not None else 0, cfg.SPLIT_BLOCKS, P * fw.N,
            x_row_div)
    run_kernel(_kernel(interpret), grid, args, cfg.meta(), interpret)
    if not direct:  # the split sum, bias (after a post factor: never contracted with it), row scale, activation
        return _split_sum(part, out, ids, bias if not cfg.HAS_BIAS else None,
                          row_scale if not cfg.ROW_SCALE else None, interpret, code)
    return out


def _split_kernel(interpret: bool):
    """_split_sum_kernel (fused_gemm_src.py), compiled or interpreted."""
    return kernels(interpret, "fused_gemm_src")._split_sum_kernel


def _split_sum(part: torch.Tensor, out: torch.Tensor, ids: torch.Tensor, bias: Optional[torch.Tensor],
               row_scale: Optional[torch.Tensor], interpret: bool, act: int = 0) -> torch.Tensor:
    """out [P, N] = partials [S, P, N] summed in split order, + bias[ids],
    * row_scale: one launch where torch takes one per operation (a decode
    forward on split GEMMs paid five more launches). With activation code
    `act`: out [P, N / 2] = act(gate, up) of that sum, in out's dtype."""
    S, P, N = part.shape
    n_out = out.shape[1]
    meta = dict(SPLIT_SUM_META, HAS_BIAS=bias is not None, ROW_SCALE=row_scale is not None, **act_constexprs(act))
    if interpret:
        meta = {k: v for k, v in meta.items() if k not in ("num_warps", "enable_fp_fusion")}
    args = (part, out, bias.contiguous() if bias is not None else part, ids.contiguous(),
            row_scale.contiguous() if row_scale is not None else part, P * n_out, n_out, S, P * N)
    if P * n_out:
        run_kernel(_split_kernel(interpret), (triton_cdiv(P * n_out, SPLIT_SUM_META["BLOCK"]),), args, meta,
                   interpret)
    return out


def _dequantize(fw: FusedWeights, dtype: torch.dtype, config: Optional[dict] = None) -> torch.Tensor:
    """The dequant-only launch: [E, N, K] in `dtype`. float32: e * fl32(s / gs)
    (the reference's values); bfloat16: e * s for two-level rows (the GEMM
    on the scratch applies 1/gs after the dot), exact by contract (2)."""
    out = torch.empty(fw.E, fw.N, fw.K, dtype=dtype, device=fw.device)
    if out.numel() == 0:  # nothing to write (the kernel takes at least one K step)
        return out
    vendor = vendor_of(fw.device)
    cfg = select_launch("dequant", vendor, kind=fw.kind, fmt=fw.fmt, bf16=dtype == torch.bfloat16, n=fw.N, k=fw.K,
                        override=config, word_order=fw.word_order, plain_scales=fw.plain_scales)
    grid = (fw.E, triton_cdiv(fw.N, cfg.BLOCK_N))
    sc = fw.scales if fw.scales is not None else out
    gs = fw.gscale if fw.gscale is not None else out
    args = (out, out, out, fw.data, sc, gs, out, out, out, out, fw.N, fw.K, out.stride(0), out.stride(1),
            fw.data.stride(0), fw.data.stride(1), sc.stride(0) if fw.scales is not None else 0,
            sc.stride(1) if fw.scales is not None else 0, sc.stride(2) if fw.scales is not None else 0,
            cfg.SPLIT_BLOCKS, 0, 1)
    run_kernel(_kernel(vendor == "interpreter"), grid, args, cfg.meta(), vendor == "interpreter")
    return out


def fused_dequantize(fw: FusedWeights, config: Optional[dict] = None) -> torch.Tensor:
    """The kernel's dequant path alone: [E, N, K] float32 (bit-exact contract)."""
    return _dequantize(fw, torch.float32, config)
