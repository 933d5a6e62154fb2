"""Fused dequant + grouped GEMM for the expert GEMMs: host code, launch
tables and contract of the kernel in fused_gemm_src.py.

Contract (what the suites test):

1. Dequantization is BIT-EXACT. The kernel decodes element codes with the
   emulation kernels' element decoder (triton_src._decode: exact bit
   construction, Inf/NaN codes, -0.0 codes stay -0.0) and multiplies by the
   same float32 per-block multiplier as harness.formats (2^(byte-127) for
   MX, fl32(s / gs[e]) for two-level formats). `fused_dequantize(fw)` runs
   exactly the kernel's dequant code and equals harness.formats.dequantize
   bitwise for every format row, element code and scale byte
   (suites/properties/test_kernels_fused_gemm.py, Triton interpreter; the
   GPU suite checks it on the device). FAST_DECODE (the tuned tables' choice)
   relies on float32 denormals for subnormal codes; BYTE_DECODE builds the
   same bits for packed e2m1 from whole bytes (three integer operations per
   element instead of six), under the same tests. BF16_DECODE (GPU only: the
   interpreter's bf16 arithmetic is wrong) builds packed e2m1 as bf16, two
   codes per 32-bit operation, and scales in bf16 -- exact wherever it acts,
   in launches with bf16 operands: e2m1 x 2^k and e2m1 x E4M3 s (precision
   "bf16" keeps nvfp4's raw s) need at most 6 significant bits of bf16's 8,
   so each product is rounded once, as the float32 decode's conversion to
   bf16 rounds it; the GPU suite holds it bitwise equal to the reference for
   every code and scale byte.

2. The GEMM is NOT bitwise equal to the unfused torch.matmul path: `tl.dot`
   sums in its own order (tensor-core fragments on GPU, numpy matmul per tile
   in the interpreter) and so does torch's BLAS. Bitwise equality of float32
   accumulation across the two is not achievable without giving up tl.dot, so
   the contract is a bound. For one GEMM output y = sum_i a_i * b_i (a = the
   GEMM input row, b = the dequantized weight row, K terms), with the SAME
   inputs given to both paths:

       |y_fused - y_unfused| <= (2 * gamma_K + c_prec) * sum_i |a_i| * |b_i|

   gamma_K = K*u / (1 - K*u), u = 2^-24. Derivation: any evaluation order of a
   float32 dot product, with or without FMA, satisfies
   |fl(y) - y| <= gamma_K * sum |a_i b_i| (Higham, Accuracy and Stability,
   Thm 3.1/3.5); both paths obey it, so their difference is within twice it.
   c_prec (`c_prec(scheme, precision)`):
     * 0 for precision "ieee" (float32 operands, tl.dot input_precision ieee);
     * 0 for "bf16" on MX-activation schemes: MX weights and MX-QDQ'd
       activations are (few-bit mantissa) x 2^k, exact in bf16, so the bf16
       tensor-core products are the exact products and accumulation is fp32;
     * 2^-7 for "bf16" with nvfp4 (operands rescaled to the exact bf16 values
       e2m1*s, x*gs_a likewise, 1/(gs_w*gs_a) applied after the dot: a few u
       per product, bounded loosely) and for any lossy bf16 use (weight-only,
       fp8 or unquantized activations forced to "bf16"; "auto" never does).
   `gemm_error_bound` computes the right-hand side per element.

3. End to end, fused and unfused share routing, the same
   moe_kernel_quantize_input calls and the same top-k sum; the only
   difference is (2). a2 QDQ is discontinuous: a GEMM1 difference within (2)
   can move an a2 element across a rounding boundary, so end-to-end
   comparisons must allow one a2 quantization step per element, or compare
   per GEMM with the bound (harness.commands.run.moe does it stage by stage).

Modes (`moe_gemm(mode=...)`): "fused" decodes each weight tile inside the K
loop (once per BLOCK_M rows of its expert); "predequant" first writes the
weights once per forward to a scratch [E, N, K] (bf16 in precision "bf16",
exact by (2); float32 in "ieee") with the same kernel's dequant path, then
runs the grouped GEMM on it -- identical operand values, same contract, and
2x faster when experts get hundreds of rows (Mixtral T=4096). "auto" picks
predequant on GPU from PREDEQUANT_MIN_ROWS_PER_EXPERT rows per expert.

Layout: pairs (token, expert) are sorted by expert (stable) and each expert's
rows padded to BLOCK_M, all on the device with fixed-size buffers (no host
sync, CUDA-graph capturable): rows [num_blocks * BLOCK_M] int64 pair ids (-1
= padding), block_expert [num_blocks] int32 (-1 = unused block, which does no
loads). All pointer offsets are int64 (checked past 2^31 bytes of weights).
CPU tensors run the Triton interpreter: keep those shapes tiny.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

import harness.formats as hf
from harness.formats.spec import U32

from harness.kernels.constants import element_constants
from harness.kernels.launch import run_kernel, triton_cdiv
from harness.kernels.loader import kernels
from harness.kernels import moe_align
from harness.kernels import fused_act
from harness.formats import scales as _scales

U = U32
PRECISIONS = ("auto", "ieee", "bf16")
RESOLVED_PRECISIONS = ("ieee", "bf16")


def _kernel(interpret: bool):
    """The grouped-GEMM kernel (fused_gemm_src.py): compiled, or the interpreter's copy."""
    return kernels(interpret, "fused_gemm_src")._moe_gemm_kernel


@dataclass
class FusedWeights:
    """Kernel format of one expert weight tensor [E, N, K]: packed fp4 / one
    code per byte / float, plus float32 per-block multipliers, all on the
    weights' device (prepared once, at conversion)."""

    kind: int  # 0 float, 1 codes
    data: torch.Tensor
    mult: Optional[torch.Tensor]  # [E, N, K/B] float32 (ieee)
    mult_bf16: Optional[torch.Tensor]  # multipliers for precision "bf16" (nvfp4: raw E4M3 s)
    post_bf16: Optional[torch.Tensor]  # [E] float32 applied after the dot in "bf16" (nvfp4: 1/gs)
    fmt: Optional[str]
    E: int
    N: int
    K: int

    @classmethod
    def from_quantized(cls, q: hf.QuantizedTensor, gscale: Optional[torch.Tensor],
                       precisions: tuple = RESOLVED_PRECISIONS) -> "FusedWeights":
        """`precisions`: the resolved precisions the weights will be run at. A
        two-level row keeps one float32 multiplier per block for each (fl32(s/gs)
        for "ieee", s for "bf16"): preparing only the one a layer runs halves
        that memory (a quarter byte per weight each)."""
        unknown = [p for p in precisions if p not in RESOLVED_PRECISIONS]
        if unknown or not precisions:
            raise ValueError(f"precisions must be a non-empty subset of {RESOLVED_PRECISIONS}, got {precisions!r}")
        spec = q.spec
        E, N, K = q.codes.shape
        if spec.is_mx:
            mult = hf.block_scale_values(q).contiguous()  # the same multipliers serve both precisions
            mult_bf16, post = mult, None
        else:
            if gscale is None:
                raise ValueError(f"{spec.name} fused weights need the per-expert global scale")
            gs = gscale.to(device=q.codes.device, dtype=torch.float32).reshape(-1)
            mult = mult_bf16 = post = None
            if "ieee" in precisions:
                qq = hf.QuantizedTensor(q.codes, q.scales, gs.reshape(-1, 1), spec.name)
                mult = hf.block_scale_values(qq).contiguous()  # fl32(s / gs[e])
            if "bf16" in precisions:
                mult_bf16 = _scales.block_scale_decode(spec, q.scales).contiguous()  # s
                post = (1.0 / gs).contiguous()
        data = hf.pack_fp4(q.codes) if spec.is_fp4 else q.codes.contiguous()
        return cls(1, data.contiguous(), mult, mult_bf16, post, spec.name, E, N, K)

    @classmethod
    def from_float(cls, w: torch.Tensor) -> "FusedWeights":
        E, N, K = w.shape
        return cls(0, w.contiguous(), None, None, None, None, E, N, K)

    @property
    def device(self):
        return self.data.device


def resolve_precision(precision: str, scheme, device=None) -> str:
    """"auto": "ieee" on CPU (interpreter) and for schemes whose activations
    are not exact in bf16 (fp8 per-tensor, weight-only, unquantized); "bf16"
    on GPU for nvfp4 and MX-activation schemes."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown fused precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if device is None or torch.device(device).type != "cuda":
        return "ieee"
    # bf16 where the operands are exact in bf16 (MX x MX) or rescaled exactly (nvfp4)
    return "bf16" if scheme.two_level or (scheme.act_block_fmt is not None) else "ieee"


BLOCK_MS = (16, 32, 64, 128)  # BLOCK_M by rows per expert (the last one for anything above)


def _block_m(num_rows: int, num_experts: int) -> int:
    per_expert = max(1, num_rows // max(1, num_experts))
    for bm in BLOCK_MS[:-1]:
        if per_expert <= bm:
            return bm
    return BLOCK_MS[-1]


def sort_pairs(ids: torch.Tensor, num_experts: int, block_m: int):
    """Stable sort of pair ids by expert, each expert padded to block_m rows.
    Returns (rows [nb*block_m] int64, block_expert [nb] int32); fixed sizes,
    no host sync (nb = ceil(P / block_m) + E is an upper bound)."""
    P = ids.shape[0]
    dev = ids.device
    nb = (P + block_m - 1) // block_m + num_experts
    sorted_e, perm = torch.sort(ids, stable=True)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=dev).scatter_add_(0, ids, torch.ones_like(ids))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(P, device=dev, dtype=torch.int64)
    dest = pad_start[sorted_e] + (pos - start[sorted_e])
    rows = torch.full((nb * block_m,), -1, dtype=torch.int64, device=dev)
    rows.scatter_(0, dest, perm)
    bstart = torch.arange(nb, device=dev, dtype=torch.int64) * block_m
    be = torch.searchsorted(pad_end, bstart, right=True)
    block_expert = torch.where(be < num_experts, be, -1).to(torch.int32)
    return rows, block_expert


def pair_layout(ids: torch.Tensor, num_experts: int, num_rows: Optional[int] = None, block_m: Optional[int] = None):
    """(rows, block_expert, block_m) of the GEMM for pair experts `ids` [P].
    Both builders give the same tensors bit for bit: up to
    moe_align.MAX_PAIRS pairs one Triton launch (moe_align.py), else the
    torch ops of sort_pairs. Compute it once per forward and pass it to both
    GEMMs (`moe_gemm(layout=...)`)."""
    bm = block_m or _block_m(ids.shape[0] if num_rows is None else num_rows, num_experts)
    ids = ids.to(torch.int64)
    if moe_align.applies(ids.shape[0], num_experts):
        rows, block_expert = moe_align.align_pairs(ids, num_experts, bm)
    else:
        rows, block_expert = sort_pairs(ids, num_experts, bm)
    return rows, block_expert, bm


# Element constants of float weights (KIND 0), which never decode: one fixed
# set, so float launches do not multiply by format.
_NO_ELEMENT = element_constants(hf.E4M3)
_ELEMENT_KEYS = ("MBITS", "WIDTH", "BIAS", "SIGN_BIT", "SPECIALS", "NAN_CODE", "INF_CODE", "MIN_NORMAL")


def _fmt_constexprs(kind: int, fmt: Optional[str]) -> dict:
    if kind == 0:
        return dict(PACKED=False, QBLOCK=32, **{k: _NO_ELEMENT[k] for k in _ELEMENT_KEYS})
    spec = hf.get_format(fmt)
    if spec.element.is_int:
        raise ValueError(f"{spec.name}: integer elements are not implemented in the fused MoE GEMM "
                         "(use backend='unfused')")
    el = element_constants(spec.element)
    return dict(PACKED=spec.is_fp4, QBLOCK=spec.block_size, **{k: el[k] for k in _ELEMENT_KEYS})


# Launch flags of the weight decode (the tables' choice; kernel docs in fused_gemm_src.py).
# BF16_DECODE acts only in launches with bf16 operands/output (gemm_meta and
# dequant_meta drop it elsewhere): there every multiplier is exact in bf16.
DECODE_FLAGS = ("FAST_DECODE", "MULT_BCAST", "PACK_JOIN", "BYTE_DECODE", "BF16_DECODE")
# GPU launch configurations by BLOCK_M class (tuned on an H200, see docs/benchmarks.md;
# `python -m tools.tune` re-measures). The flags never change results
# bitwise except FAST_DECODE, which is exact where denormals are preserved
# (checked by fused_dequantize on the device).
GPU_CONFIGS = {
    "small": dict(BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3, FAST_DECODE=True, MULT_BCAST=True,
                  PACK_JOIN=True, BYTE_DECODE=True, BF16_DECODE=True),
    "large": dict(BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, FAST_DECODE=True, MULT_BCAST=True,
                  PACK_JOIN=True, BYTE_DECODE=True, BF16_DECODE=True),
    # "small" for a short K loop (K <= SHORT_K_MAX: Qwen3's GEMM2, K = 768): BLOCK_K
    # 256 leaves 3 iterations there; 128 ran its T=1 / T=16 GEMM 1.29x / 1.08x
    # faster on an H200 (docs/benchmarks.md)
    "small_short_k": dict(BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=3, FAST_DECODE=True, MULT_BCAST=True,
                          PACK_JOIN=True, BYTE_DECODE=True, BF16_DECODE=True),
    # grouped GEMM over already-dequantized (bf16) weights, mode "predequant"
    "large_float": dict(BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
    # the dequant-only pass of mode "predequant" (BF16_DECODE off: bound by
    # writing its bf16 scratch, it ran 0.99-1.02x as fast with it on an H200)
    "dequant": dict(BLOCK_N=16, BLOCK_K=512, num_warps=4, num_stages=2, FAST_DECODE=True, MULT_BCAST=True,
                    PACK_JOIN=True, BYTE_DECODE=True),
}
# ROCm with float32 operands (precision "ieee", or float32 weights): gfx942 has
# 64 KiB of LDS per workgroup, and the H200 tiles above need 80-192 KiB there
# (`moe-harness targets`, docs/targets.md), so these replace them. Chosen to
# fit (<= 32 KiB on gfx942), not yet tuned on an MI300X.
ROCM_F32_CONFIGS = {
    "small": dict(BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=2, FAST_DECODE=True, MULT_BCAST=True,
                  PACK_JOIN=True, BYTE_DECODE=True),
    "large": dict(BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2, FAST_DECODE=True, MULT_BCAST=True,
                  PACK_JOIN=True, BYTE_DECODE=True),
    "large_float": dict(BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=2),
}
# ROCm with bf16 operands and 2-byte float weights (mode "predequant"'s bf16
# scratch, bf16/fp16 checkpoints): compiled as every model runs them (sizes
# multiples of 16, so Triton vectorises and pipelines deeper), the H200 tiles
# need 72-96 KiB of LDS on gfx942. The same BLOCK_N with 2 stages (and BLOCK_K
# 128 below BLOCK_M 64) needs 20-48 KiB there (`moe-harness targets`).
# Chosen to fit, not yet tuned on an MI300X. Code-decoding launches
# (1-byte weights and smaller) keep GPU_CONFIGS on ROCm: <= 64 KiB there.
ROCM_BF16_FLOAT_CONFIGS = {
    "small": dict(BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=2),
    "large": dict(BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=2),
    "large_float": dict(BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=2),
}
SHORT_K_MAX = 1024
# mode "auto" pre-dequantizes (on GPU) once an expert averages this many rows.
# Measured per GEMM on an H200 (docs/benchmarks.md): fused was
# 1.09-1.56x faster at 128 and 256 rows per expert (Qwen3 T=2048 / 4096,
# Mixtral T=1024), predequant 1.07-1.17x faster at 512 on Mixtral (T=2048;
# Qwen3 T=8192 within 8% either way) and 1.35-1.45x at 1024.
PREDEQUANT_MIN_ROWS_PER_EXPERT = 512
INTERP_CONFIG = dict(BLOCK_N=16, BLOCK_K=32)


def on_rocm() -> bool:
    return torch.version.hip is not None


def launch_tables() -> dict:
    """Which table the GEMM's launches take on this machine, by tl.dot operand
    width (and, for bf16, whether the weights are 2-byte floats)."""
    rocm = on_rocm()
    return {"bf16": "GPU_CONFIGS", "bf16, float weights": "ROCM_BF16_FLOAT_CONFIGS" if rocm else "GPU_CONFIGS",
            "float32": "ROCM_F32_CONFIGS" if rocm else "GPU_CONFIGS"}


def rocm_table(rocm: bool, f32: bool, weights_kind: int) -> Optional[dict]:
    """The ROCm table that replaces GPU_CONFIGS for a launch (weights_kind: 0
    float weights, 1 codes), or None."""
    if not rocm:
        return None
    return ROCM_F32_CONFIGS if f32 else ROCM_BF16_FLOAT_CONFIGS if weights_kind == 0 else None


def launch_config(bm: int, interpret: bool, override: Optional[dict] = None, kind: Optional[str] = None,
                  rocm_configs: Optional[dict] = None) -> dict:
    """The launch table entry: INTERP_CONFIG, else GPU_CONFIGS[kind] (by default
    "small" below BLOCK_M 64, else "large"), or rocm_configs[kind] where that
    ROCm table (rocm_table) has one; `override` on top."""
    if interpret:
        cfg = dict(INTERP_CONFIG)
    else:
        kind = kind or ("small" if bm < 64 else "large")
        cfg = dict(rocm_configs[kind] if rocm_configs and kind in rocm_configs else GPU_CONFIGS[kind])
    cfg.update(override or {})
    if interpret:
        for k in ("num_warps", "num_stages"):
            cfg.pop(k, None)
    return cfg


def gemm_meta(kind: int, fmt: Optional[str], *, bf16: bool, has_post: bool, block_m: int, n: int, k: int,
              interpret: bool, config: Optional[dict] = None, cfg_kind: Optional[str] = None, rocm: bool = False,
              w_bytes: int = 1) -> dict:
    """Constexprs and compile options (num_warps, num_stages) of one grouped-GEMM
    launch; the ahead-of-time check (fused_aot.py) enumerates the same.
    rocm: launching on ROCm; w_bytes: bytes per stored weight element."""
    f32 = not bf16 or (kind == 0 and w_bytes == 4)
    if cfg_kind is None and kind == 1 and block_m < 64 and 0 < k <= SHORT_K_MAX and not (rocm and f32):
        cfg_kind = "small_short_k"
    cfg = launch_config(block_m, interpret, config, cfg_kind, rocm_configs=rocm_table(rocm, f32, kind))
    if kind == 0:
        for flag in DECODE_FLAGS:
            cfg.pop(flag, None)
    elif not bf16:  # "ieee" multipliers (fl32(s / gs)) are not exact in bf16
        cfg.pop("BF16_DECODE", None)
    _refuse_interpreted_bf16_decode(cfg, interpret)
    cfg.setdefault("EVEN_NK", n % cfg["BLOCK_N"] == 0 and k % cfg["BLOCK_K"] == 0)
    return dict(KIND=kind, BF16=bf16, HAS_POST=has_post, DEQUANT_ONLY=False, BLOCK_M=block_m,
                **_fmt_constexprs(kind, fmt), **cfg)


def dequant_meta(kind: int, fmt: Optional[str], *, n: int, k: int, interpret: bool,
                 config: Optional[dict] = None, bf16_out: bool = False) -> dict:
    """Constexprs and compile options of the dequant-only launch (mode
    "predequant"). bf16_out: it writes the bf16 scratch of precision "bf16"
    (multipliers exact in bf16), the only launch BF16_DECODE may act in."""
    cfg = launch_config(16, interpret, config, None if interpret else "dequant")
    if not bf16_out:
        cfg.pop("BF16_DECODE", None)
    _refuse_interpreted_bf16_decode(cfg, interpret)
    if interpret:
        cfg.update(BLOCK_N=16, BLOCK_K=32)
    cfg.setdefault("EVEN_NK", n % cfg["BLOCK_N"] == 0 and k % cfg["BLOCK_K"] == 0)
    return dict(KIND=kind, BF16=False, HAS_POST=False, DEQUANT_ONLY=True, BLOCK_M=16, **_fmt_constexprs(kind, fmt),
                **cfg)


def _refuse_interpreted_bf16_decode(cfg: dict, interpret: bool) -> None:
    if interpret and cfg.get("BF16_DECODE"):
        # The Triton interpreter's bf16 arithmetic is wrong (0x8040 * 2^126 gave -2^-63, not -0.5; triton 3.9).
        raise ValueError("launch flag BF16_DECODE needs a CUDA/ROCm device: the Triton interpreter (CPU) does not "
                         "compute bf16 arithmetic correctly")


MODES = ("auto", "fused", "predequant")


def moe_gemm(x: torch.Tensor, ids: torch.Tensor, fw: FusedWeights, *, precision: str = "ieee",
             a_gscale: Optional[torch.Tensor] = None, block_m: Optional[int] = None,
             config: Optional[dict] = None, mode: str = "auto", layout: Optional[tuple] = None,
             x_row_div: int = 1) -> torch.Tensor:
    """See _moe_gemm_impl. Launched through the custom op moe_harness::moe_gemm,
    opaque to torch.compile (dynamo cannot trace Triton's launcher state), so
    compiled forwards keep one graph; a launch-config override (tuning only)
    calls the implementation directly."""
    if config is not None:
        return _moe_gemm_impl(x, ids, fw, precision=precision, a_gscale=a_gscale, block_m=block_m,
                              config=config, mode=mode, layout=layout, x_row_div=x_row_div)
    rows, block_expert, bm = layout if layout is not None else (None, None, block_m or 0)
    return _moe_gemm_op(x, ids, fw.data, fw.mult, fw.mult_bf16, fw.post_bf16, a_gscale, fw.kind,
                        fw.fmt or "", fw.E, fw.N, fw.K, precision, bm, mode, rows, block_expert, x_row_div)


@torch.library.custom_op("moe_harness::moe_gemm", mutates_args=())
def _moe_gemm_op(x: torch.Tensor, ids: torch.Tensor, data: torch.Tensor, mult: Optional[torch.Tensor],
                 mult_bf16: Optional[torch.Tensor], post_bf16: Optional[torch.Tensor],
                 a_gscale: Optional[torch.Tensor], kind: int, fmt: str, E: int, N: int, K: int,
                 precision: str, block_m: int, mode: str, rows: Optional[torch.Tensor] = None,
                 block_expert: Optional[torch.Tensor] = None, x_row_div: int = 1) -> torch.Tensor:
    fw = FusedWeights(kind, data, mult, mult_bf16, post_bf16, fmt or None, E, N, K)
    layout = (rows, block_expert, block_m) if rows is not None else None
    return _moe_gemm_impl(x, ids, fw, precision=precision, a_gscale=a_gscale, block_m=block_m or None, mode=mode,
                          layout=layout, x_row_div=x_row_div)


@_moe_gemm_op.register_fake
def _moe_gemm_fake(x, ids, data, mult, mult_bf16, post_bf16, a_gscale, kind, fmt, E, N, K, precision, block_m, mode,
                   rows=None, block_expert=None, x_row_div=1):
    return x.new_empty((ids.shape[0], N), dtype=torch.float32)


def _moe_gemm_impl(x: torch.Tensor, ids: torch.Tensor, fw: FusedWeights, *, precision: str = "ieee",
                   a_gscale: Optional[torch.Tensor] = None, block_m: Optional[int] = None,
                   config: Optional[dict] = None, mode: str = "auto", layout: Optional[tuple] = None,
                   x_row_div: int = 1) -> torch.Tensor:
    """x [P / x_row_div, K] float32, ids [P] int64 expert of each pair -> [P,
    N] float32 = x[p // x_row_div] @ W[ids[p]].T (GEMM1 passes the tokens
    and top_k: no [P, K] copy of x). precision "bf16" with nvfp4 needs
    a_gscale (the encode-side global scale x was QDQ'd with).

    mode "fused": dequant inside the GEMM's K loop (each weight tile is decoded
    once per BLOCK_M rows of its expert). "predequant": the same kernel's
    dequant path first writes the weights once into a scratch [E, N, K]
    (bf16 for precision "bf16" -- exact, see the contract -- else float32),
    then the grouped GEMM runs on it: identical operand values, so contract (2)
    holds unchanged; it pays off when experts get many rows. "auto": predequant
    on GPU when rows per expert >= PREDEQUANT_MIN_ROWS_PER_EXPERT, else fused."""
    if precision not in ("ieee", "bf16"):
        raise ValueError(f"precision must be 'ieee' or 'bf16' here, got {precision!r}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    K = x.shape[1]
    P = ids.shape[0]
    if K != fw.K:
        raise ValueError(f"x has K={K}, weights K={fw.K}")
    if not isinstance(x_row_div, int) or x_row_div < 1 or x.shape[0] * x_row_div != P:
        raise ValueError(f"x has {x.shape[0]} rows and x_row_div={x_row_div!r}: expected {P} pairs (ids) = rows x "
                         f"x_row_div")
    out = torch.empty(P, fw.N, dtype=torch.float32, device=x.device)
    if P == 0:
        return out
    interpret = x.device.type != "cuda"
    if mode == "auto":
        many = P >= PREDEQUANT_MIN_ROWS_PER_EXPERT * fw.E
        mode = "predequant" if (not interpret and fw.kind == 1 and many) else "fused"
    bf16 = precision == "bf16"
    mult, post = (fw.mult_bf16, fw.post_bf16) if bf16 else (fw.mult, None)
    if fw.kind == 1 and mult is None:
        raise ValueError(f"{fw.fmt} fused weights hold no multipliers for precision {precision!r}: prepare them "
                         f"with FusedWeights.from_quantized(..., precisions=(..., {precision!r}))")
    if bf16 and interpret:
        # The Triton interpreter's dot on bf16 operands returns garbage (one-hot
        # rows gave 7.9e8 for weights of 0.06, triton 3.9); bf16 is a GPU path.
        raise ValueError("fused GEMM precision 'bf16' needs a CUDA/ROCm device: the Triton interpreter (CPU) does not "
                         "compute bf16 dots correctly; use precision 'ieee' (what 'auto' picks on CPU)")
    xk = x.to(torch.float32)
    g = None
    if bf16 and post is not None:  # nvfp4: x * gs_a is exactly e2m1 * s in bf16
        if a_gscale is None:
            raise ValueError("nvfp4 fused GEMM in bf16 needs a_gscale")
        g = a_gscale.to(device=x.device, dtype=torch.float32).reshape(())
        if interpret:
            xk = (xk * g).to(torch.bfloat16)
        else:  # one pass, the same bits (fused_act.scale_to_bf16)

            xk = fused_act.scale_to_bf16(xk, g)
        # the kernel applies post[e] * fl(1 / g) after the dot (no host launches)
    elif bf16:
        xk = xk.to(torch.bfloat16)
    xk = xk.contiguous()
    if layout is not None:  # (rows, block_expert, block_m) of pair_layout, shared by both GEMMs
        rows, block_expert, bm = layout
    else:
        rows, block_expert, bm = pair_layout(ids, fw.E, block_m=block_m)
    run_fw, cfg_kind = fw, None
    if mode == "predequant" and fw.kind == 1:
        scratch = _dequantize(fw, torch.bfloat16 if bf16 else torch.float32, mult)
        run_fw = FusedWeights(0, scratch, None, None, None, None, fw.E, fw.N, fw.K)
        mult, cfg_kind = None, ("large_float" if bm >= 64 else "small")
    meta = gemm_meta(run_fw.kind, run_fw.fmt, bf16=bf16, has_post=post is not None, block_m=bm, n=fw.N, k=K,
                     interpret=interpret, config=config, cfg_kind=cfg_kind, rocm=on_rocm(),
                     w_bytes=run_fw.data.element_size())
    n_tiles = triton_cdiv(fw.N, meta["BLOCK_N"])
    splits = meta.pop("SPLIT_K", None)  # a tuning override; else from the shapes
    if splits is None:
        splits = split_k(P, fw.E, n_tiles, K, bm, meta["BLOCK_K"], x.device)
    elif not isinstance(splits, int) or splits < 1:
        raise ValueError(f"launch config SPLIT_K must be an int >= 1, got {splits!r}")
    k_blocks = triton_cdiv(K, meta["BLOCK_K"])
    split_blocks = triton_cdiv(k_blocks, splits)
    splits = triton_cdiv(k_blocks, split_blocks)  # no empty split
    # Split-K partials land in [splits, P, N] and are summed in split order
    # (torch's reduction, no atomics: the same bits every run); contract (2)
    # bounds any summation order, so it covers the split sum too. HAS_POST
    # scales each partial: one rounding per split, inside c_prec (2^-7) of
    # the two-level rows that have a post factor.
    part = out if splits == 1 else torch.empty(splits, P, fw.N, dtype=torch.float32, device=x.device)
    grid = (block_expert.shape[0], n_tiles, splits)
    dummy = out
    args = (xk, rows, block_expert, run_fw.data, mult if mult is not None else dummy,
            post if post is not None else dummy, g.reshape(1) if g is not None else dummy, part, fw.N, K,
            xk.stride(0), out.stride(0),
            run_fw.data.stride(0), run_fw.data.stride(1), mult.stride(0) if mult is not None else 0,
            mult.stride(1) if mult is not None else 0, split_blocks, P * fw.N, x_row_div)
    run_kernel(_kernel(interpret), grid, args, meta, interpret)
    return out if splits == 1 else part.sum(0)


# Split-K at decode sizes: a GEMM whose working programs (at least the
# distinct experts, or P / BLOCK_M blocks, times the N tiles) leave the SMs
# under-filled gets its K range split, up to MAX_SPLIT_K ways, while each
# split keeps MIN_K_PER_SPLIT_BLOCKS BLOCK_Ks. Measured on an H200
# (docs/benchmarks.md): Mixtral's GEMM2 at T=1 (128 programs, 56
# BLOCK_Ks) runs 1.95-2.57x faster in 4 splits, at T=16 (512 programs) 1.24x
# (nvfp4) and 0.98x (mxfp4) in 2; a short K loop (Qwen3, 3-8 BLOCK_Ks) or a
# full grid only gets slower split (1.1-2x): the pipeline prologue and the
# partial sum cost more than the programs gain.
MAX_SPLIT_K = 4
SPLIT_PROGRAMS_PER_SM = 4
MIN_K_PER_SPLIT_BLOCKS = 8
_SM_COUNT: dict = {}


def split_k(P: int, E: int, n_tiles: int, K: int, block_m: int, block_k: int, device) -> int:
    """Splits of K for one launch, from shapes alone (no host sync, so CUDA
    graphs capture it): the working programs are at least max(distinct
    experts, ceil(P / block_m)) x n_tiles, distinct experts <= min(E, P); 1 on
    the interpreter."""
    device = torch.device(device)
    if device.type != "cuda":
        return 1
    if device not in _SM_COUNT:
        _SM_COUNT[device] = torch.cuda.get_device_properties(device).multi_processor_count
    working = max(min(E, P), triton_cdiv(P, block_m)) * n_tiles
    splits = 1
    while (splits < MAX_SPLIT_K and working * splits < SPLIT_PROGRAMS_PER_SM * _SM_COUNT[device]
           and K // (2 * splits * block_k) >= MIN_K_PER_SPLIT_BLOCKS):
        splits *= 2
    return splits


def _dequantize(fw: FusedWeights, dtype: torch.dtype, mult: Optional[torch.Tensor],
                config: Optional[dict] = None) -> torch.Tensor:
    out = torch.empty(fw.E, fw.N, fw.K, dtype=dtype, device=fw.device)
    interpret = fw.device.type != "cuda"
    meta = dequant_meta(fw.kind, fw.fmt, n=fw.N, k=fw.K, interpret=interpret, config=config,
                        bf16_out=dtype == torch.bfloat16)
    grid = (fw.E, triton_cdiv(fw.N, meta["BLOCK_N"]))
    m = mult if mult is not None else out
    args = (out, out, out, fw.data, m, out, out, out, fw.N, fw.K, out.stride(0), out.stride(1),
            fw.data.stride(0), fw.data.stride(1), m.stride(0) if mult is not None else 0,
            m.stride(1) if mult is not None else 0, triton_cdiv(fw.K, meta["BLOCK_K"]), 0, 1)
    run_kernel(_kernel(interpret), grid, args, meta, interpret)
    return out


def fused_dequantize(fw: FusedWeights, config: Optional[dict] = None) -> torch.Tensor:
    """The kernel's dequant path alone: [E, N, K] float32 (bit-exact contract)."""
    if fw.kind == 1 and fw.mult is None:
        raise ValueError(f"{fw.fmt} fused weights were prepared without the 'ieee' multipliers")
    return _dequantize(fw, torch.float32, fw.mult, config)


def c_prec(scheme, precision: str) -> float:
    """The c_prec term of contract (2) for a scheme and a resolved precision."""
    if precision == "ieee":
        return 0.0
    exact = scheme.act_block_fmt is not None and not scheme.two_level
    return 0.0 if exact else 2.0 ** -7


def gemm_error_bound(x: torch.Tensor, ids: torch.Tensor, w_deq: torch.Tensor, *, c: float = 0.0) -> torch.Tensor:
    """Right-hand side of contract (2): (2*gamma_K + c) * (|x| @ |W[e]|^T) per
    output element, [P, N] float64. w_deq: the dequantized weights [E, N, K];
    c: `c_prec(scheme, precision)`."""
    K = x.shape[1]
    gamma = K * U / (1 - K * U)
    ax = x.abs().to(torch.float64)
    aw = w_deq.abs().to(torch.float64)[ids]  # [P, N, K]
    mag = torch.einsum("pk,pnk->pn", ax, aw)
    return (2 * gamma + c) * mag
