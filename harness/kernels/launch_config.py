"""Launch configuration of the fused MoE GEMM kernel (fused_gemm_src.py): the
per-vendor launch tables, one typed result per launch, and one selector.

`select_launch(launch, vendor, ...)` returns a `LaunchConfig`: everything one
launch of _moe_gemm_kernel needs -- what it computes (KIND, BF16, HAS_POST,
DEQUANT_ONLY, the weight format's element constexprs), the tile and compile
options of the table row it takes, the weight-decode flags, whether its N and
K tiles need masks (EVEN_NK) and its K split. The launcher (fused_gemm.py) and
the ahead-of-time compile check (harness.aot.fused_launches) both call it, so
the check compiles exactly the launches the host code makes.

The choice reads, in order: the vendor's tables for the launch's tl.dot
operands (VENDOR_TABLES), the rows the launch can take (`row_names`: BLOCK_M
class, K loop length, mode "predequant"), the override, whether the K loop
has a tail (`k_tail`: masks on its last BLOCK_K only), then the rules no row
may break (no decode flags on float weights, BF16_DECODE only where the
multipliers are exact in bf16, never on the interpreter).

Two override hooks: `override=` changes one launch (a mapping of LaunchRow
fields, EVEN_NK, K_TAIL, SPLIT_K; moe_gemm's `config=`), and `set_row` replaces one row
of a table for every later launch of the process (tools/tune.py measures
candidate rows that way, mode "predequant"'s two launches included).

Mode "auto" (`resolve_mode`) chooses which launches run: the fused GEMM, or
the dequant pass and the GEMM on its scratch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Mapping, Optional

import torch

import harness.formats as hf

from harness.kernels import fp4_words
from harness.kernels.constants import SWIGLU_ALPHA, SWIGLU_LIMIT, element_constants
from harness.kernels.launch import triton_cdiv
from harness.kernels.split_k import split_k


@dataclass(frozen=True)
class LaunchRow:
    """One row of a launch table: tile, compile options, weight-decode flags.
    A flag left None is not passed (the kernel's default, fused_gemm_src.py);
    num_warps / num_stages None: the interpreter, which takes no compile
    options. maxnreg (CUDA only; dropped elsewhere): the most registers a
    thread may hold, so more CTAs share an SM (ptxas spills past what the
    launch needs)."""

    BLOCK_N: int
    BLOCK_K: int
    num_warps: Optional[int] = None
    num_stages: Optional[int] = None
    maxnreg: Optional[int] = None
    FAST_DECODE: Optional[bool] = None
    MULT_BCAST: Optional[bool] = None
    PACK_JOIN: Optional[bool] = None
    BYTE_DECODE: Optional[bool] = None
    BF16_DECODE: Optional[bool] = None
    BF16_TRUNC: Optional[bool] = None
    SWAP_MN: Optional[bool] = None
    FOLD_BIAS: Optional[bool] = None

    def settings(self) -> dict:
        """The fields that are set, as `override=` takes them."""
        return {k: v for k, v in asdict(self).items() if v is not None}


# Launch flags of the weight decode (kernel docs in fused_gemm_src.py).
# BF16_DECODE acts only in launches with bf16 operands/output (select_launch
# drops it elsewhere): there every multiplier is exact in bf16.
DECODE_FLAGS = ("FAST_DECODE", "MULT_BCAST", "PACK_JOIN", "BYTE_DECODE", "BF16_DECODE", "BF16_TRUNC", "FOLD_BIAS")
_DECODE = dict(FAST_DECODE=True, MULT_BCAST=True, PACK_JOIN=True, BYTE_DECODE=True)

# GPU launch rows by BLOCK_M class (tuned on an H200, see docs/benchmarks.md;
# `python -m tools.tune` re-measures). The flags never change results
# bitwise except FAST_DECODE, which is exact where denormals are preserved
# (checked by fused_dequantize on the device).
GPU_CONFIGS = {
    # SWAP_MN (the decode rows): acts only on weights in the "mma" word order (word_order); FOLD_BIAS only on
    # e2m1 in bf16 on CUDA, MX weights with plain scale bytes (FusedWeights.plain_scales) or NVFP4 GEMMs
    # (0.86-1.00x the MX decode GEMMs on an H200; at prefill, on the "large" row, 0.98-1.04x: not set there)
    "small": LaunchRow(BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3, **_DECODE, BF16_DECODE=True, SWAP_MN=True,
                       FOLD_BIAS=True),
    # BLOCK_M 64 and up. SWAP_MN (on "mma" words): the weights are the wgmma's register operand, where the product
    # untransposed stores each decoded tile to shared memory and waits for its wgmma every K step; transposed, the
    # next step's decode can run beside the MMA. On an H200 at prefill (T=4096, BLOCK_M 128, each GEMM alone):
    # Qwen3's w13 / w2 0.86x / 0.90x the untransposed row's time (docs/benchmarks.md)
    "large": LaunchRow(BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, **_DECODE, BF16_DECODE=True, SWAP_MN=True),
    # "large" for scale bytes in order "n" (gpt-oss-120b's: scale_order): its w13 / w2 0.83x / 0.72x the
    # untransposed row's time, where "large"'s tile transposed took 0.82x / 0.84x
    # "large" for a long K loop (K >= LONG_K_MIN, a multiple of its BLOCK_K; on "mma" words, scale order "k"):
    # one 128-deep K step where "large" takes two, 3 stages (113 KiB of shared memory: one CTA an SM). On an H200
    # (each W4A16 GEMM alone, `python -m tools.prefill_ab --what long-k`) Qwen3's w13 (K 2048) ran 0.95x "large"'s
    # time at BLOCK_M 64 and 128, Mixtral's w13 (K 4096) 0.86-0.88x, its w2 (K 14336) 0.97-1.00x; Qwen3's w2
    # (K 768) 1.4x in a tile sweep: short K loops keep "large" (docs/benchmarks.md)
    "large_long_k": LaunchRow(BLOCK_N=128, BLOCK_K=128, num_warps=4, num_stages=3, **_DECODE, BF16_DECODE=True,
                              SWAP_MN=True),
    "large_n": LaunchRow(BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=3, **_DECODE, BF16_DECODE=True,
                         SWAP_MN=True),
    # BLOCK_M 32 on "mma" words whose K is stored to a multiple of its BLOCK_K: "large_long_k"'s tile with the
    # decode rows' flags. On an H200 (each W4A16 GEMM alone at BLOCK_M 32, the tile at SPLIT_K 1 against the
    # table's "small" / "small_short_k" launch; docs/benchmarks.md) gpt-oss' w13 / w2 at T=1024 0.69x / 0.79x,
    # Qwen3's at T=512 0.89x / 0.89x (its w2's K of 768 too), Mixtral's at T=128 0.93x / 0.88x
    "medium": LaunchRow(BLOCK_N=128, BLOCK_K=128, num_warps=4, num_stages=3, **_DECODE, BF16_DECODE=True,
                        SWAP_MN=True, FOLD_BIAS=True),
    # "small" for a short K loop (K <= SHORT_K_MAX: Qwen3's GEMM2, K = 768): BLOCK_K
    # 256 leaves 3 iterations there; 128 ran its T=1 / T=16 GEMM 1.29x / 1.08x
    # faster on an H200 (docs/benchmarks.md)
    "small_short_k": LaunchRow(BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=3, **_DECODE, BF16_DECODE=True,
                               SWAP_MN=True, FOLD_BIAS=True),
    # grouped GEMM over already-dequantized (bf16) weights, mode "predequant"
    "large_float": LaunchRow(BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
    # the dequant-only pass of mode "predequant" (BF16_DECODE off: bound by
    # writing its bf16 scratch, it ran 0.99-1.02x as fast with it on an H200)
    "dequant": LaunchRow(BLOCK_N=16, BLOCK_K=512, num_warps=4, num_stages=2, **_DECODE),
}
# ROCm with float32 operands (precision "ieee", or float32 weights): gfx942 has
# 64 KiB of LDS per workgroup, and the H200 tiles above need 80-192 KiB there
# (`moe-harness targets`, docs/targets.md), so these replace them. Chosen to
# fit (<= 32 KiB on gfx942), not yet tuned on an MI300X.
ROCM_F32_CONFIGS = {
    "small": LaunchRow(BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=2, **_DECODE),
    "large": LaunchRow(BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2, **_DECODE),
    "large_float": LaunchRow(BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=2),
}
# ROCm with bf16 operands and 2-byte float weights (mode "predequant"'s bf16
# scratch, bf16/fp16 checkpoints): compiled as every model runs them (sizes
# multiples of 16, so Triton vectorises and pipelines deeper), the H200 tiles
# need 72-96 KiB of LDS on gfx942. The same BLOCK_N with 2 stages (and BLOCK_K
# 128 below BLOCK_M 64) needs 20-48 KiB there (`moe-harness targets`).
# Chosen to fit, not yet tuned on an MI300X. Code-decoding launches
# (1-byte weights and smaller) keep the GPU_CONFIGS tiles on ROCm: <= 64 KiB there.
ROCM_BF16_FLOAT_CONFIGS = {
    "small": LaunchRow(BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=2),
    "large": LaunchRow(BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=2),
    "large_float": LaunchRow(BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=2),
}
# ROCm with bf16 operands on element codes: the H200 rows, BF16_DECODE's
# multiplies done in float32 and truncated to bf16 (BF16_TRUNC; the same bits).
# gfx942 and gfx950 have no packed bf16 multiply: there each bf16 product is a
# float32 multiply and a software round to nearest even (bit extract, add,
# NaN compare, select), needless where every product is a bf16 number. The
# "small" w_mxfp4 launch at BLOCK_M 16 compiles to 1844 instead of 3391
# instructions on gfx942 (docs/targets.md, `moe-harness targets --isa`); on
# sm_90, whose HMUL2 multiplies bf16 pairs, the same change costs (1176 ->
# 1504), so CUDA keeps bf16 multiplies. Not yet timed on an MI300X. No SWAP_MN:
# ROCm's weights keep the "k" word order (word_order).
ROCM_BF16_CODE_CONFIGS = {name: replace(row, BF16_DECODE=True, BF16_TRUNC=True, SWAP_MN=None, FOLD_BIAS=None)
                          for name, row in GPU_CONFIGS.items()
                          if row.BYTE_DECODE and name not in ("large_n", "large_long_k", "medium")}
# The Triton interpreter (CPU tensors): one small tile for every launch, the
# kernel's default flags.
INTERP_CONFIGS = dict.fromkeys(GPU_CONFIGS, LaunchRow(BLOCK_N=16, BLOCK_K=32))

TABLES = {"GPU_CONFIGS": GPU_CONFIGS, "ROCM_F32_CONFIGS": ROCM_F32_CONFIGS,
          "ROCM_BF16_FLOAT_CONFIGS": ROCM_BF16_FLOAT_CONFIGS, "ROCM_BF16_CODE_CONFIGS": ROCM_BF16_CODE_CONFIGS,
          "INTERP_CONFIGS": INTERP_CONFIGS}
# tl.dot operand classes (`operands`)
OPERANDS = ("bf16", "bf16, float weights", "float32")
# The tables a launch reads by vendor and operand class: the first table that
# holds one of the launch's rows gives it (a vendor table replaces the CUDA
# rows it has).
VENDOR_TABLES = {
    "cuda": dict.fromkeys(OPERANDS, ("GPU_CONFIGS",)),
    "rocm": {"bf16": ("ROCM_BF16_CODE_CONFIGS", "GPU_CONFIGS"),
             "bf16, float weights": ("ROCM_BF16_FLOAT_CONFIGS", "GPU_CONFIGS"),
             "float32": ("ROCM_F32_CONFIGS", "GPU_CONFIGS")},
    "interpreter": dict.fromkeys(OPERANDS, ("INTERP_CONFIGS",)),
}
VENDORS = tuple(VENDOR_TABLES)

# Launches of the kernel: the grouped GEMM on the weights as prepared (element
# codes decoded in the K loop, or float weights), the grouped GEMM on mode
# "predequant"'s dequantized scratch, and the dequant-only pass.
LAUNCHES = ("gemm", "scratch_gemm", "dequant")
LARGE_BLOCK_M = 64  # BLOCK_M from which a GEMM takes the "large" rows
MEDIUM_BLOCK_M = 32  # BLOCK_M from which a GEMM on "mma" words may take "medium"
SHORT_K_MAX = 1024
LONG_K_MIN = 2048  # "large_long_k"'s K loops: the shortest K it was measured faster on (Qwen3's w13)
MAXNREG_MIN = 24  # the smallest register cap a row may set (LaunchRow.maxnreg)
DEQUANT_BLOCK_M = 16  # the dequant pass's BLOCK_M constexpr (it has no rows of x)
# The fields an override may set.
OVERRIDABLE = tuple(f.name for f in fields(LaunchRow)) + ("EVEN_NK", "K_TAIL", "K_OVERREAD", "SPLIT_K")

# The activations a GEMM1 launch can apply in its epilogue (the kernel's ACT; fused_gemm_src._act), by the names
# of harness.moe.activations, and their constexprs
ACT_CODES = {"silu": 1, "swiglu_clamp": 2}
ACT_NAMES = {code: name for name, code in ACT_CODES.items()}


def act_constexprs(act: int) -> dict:
    """The kernel constexprs of activation code `act` (0: none, nothing passed)."""
    if act not in (0, *ACT_CODES.values()):
        raise ValueError(f"unknown activation code {act!r}; expected 0 or one of {ACT_CODES}")
    if not act:
        return {}
    if act == ACT_CODES["swiglu_clamp"]:
        return dict(ACT=act, ACT_LIMIT=SWIGLU_LIMIT, ACT_ALPHA=SWIGLU_ALPHA)
    return dict(ACT=act)


MODES = ("auto", "fused", "predequant")
# mode "auto" pre-dequantizes (on GPU) once an expert averages this many rows.
# Measured per GEMM on an H200 (docs/benchmarks.md): fused was
# 1.09-1.56x faster at 128 and 256 rows per expert (Qwen3 T=2048 / 4096,
# Mixtral T=1024), predequant 1.07-1.17x faster at 512 on Mixtral (T=2048;
# Qwen3 T=8192 within 8% either way) and 1.35-1.45x at 1024.
PREDEQUANT_MIN_ROWS_PER_EXPERT = 512

# Element constants of float weights (KIND 0), which never decode: one fixed
# set, so float launches do not multiply by format.
_NO_ELEMENT = element_constants(hf.E4M3)
_ELEMENT_KEYS = ("MBITS", "WIDTH", "BIAS", "SIGN_BIT", "SPECIALS", "NAN_CODE", "INF_CODE", "MIN_NORMAL")
# LaunchConfig fields that are kernel constexprs or compile options, in launch order.
_LAUNCH_KEYS = tuple(f.name for f in fields(LaunchRow)) + ("EVEN_NK", "K_TAIL", "K_OVERREAD", "PLAIN_SCALES")


@dataclass(frozen=True)
class LaunchConfig:
    """One launch of _moe_gemm_kernel. `table` / `row`: the table row it took;
    fields in capitals and num_warps / num_stages: what the kernel is given (a
    field left None is not passed); SPLIT_K programs share the K loop, each
    over SPLIT_BLOCKS BLOCK_Ks."""

    launch: str
    vendor: str
    table: str
    row: str
    fmt: Optional[str]
    KIND: int
    BF16: bool
    HAS_POST: bool
    RAW_S: bool  # two-level codes multiplied by s alone (bf16 operands or scratch; 1/gs after the dot)
    HAS_BIAS: bool  # the epilogue adds the expert's bias row (else the split-sum pass after it does)
    ROW_SCALE: bool  # the epilogue multiplies each pair's row by its weight (else the split-sum pass does)
    ACT: int  # the activation the epilogue applies after them (ACT_CODES; 0: none, or a pass after the GEMM)
    DEQUANT_ONLY: bool
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: Optional[int]
    num_stages: Optional[int]
    maxnreg: Optional[int]
    FAST_DECODE: Optional[bool]
    MULT_BCAST: Optional[bool]
    PACK_JOIN: Optional[bool]
    BYTE_DECODE: Optional[bool]
    BF16_DECODE: Optional[bool]
    BF16_TRUNC: Optional[bool]
    SWAP_MN: Optional[bool]
    FOLD_BIAS: Optional[bool]  # e2m1 in bf16 on CUDA (plain MX scales, NVFP4): one packed multiply a pair
    MMA_ORDER: bool  # e2m1 words in fp4_words' "mma" order (the weights' word_order)
    EVEN_NK: bool
    K_TAIL: bool  # N without a tail, K with one: masks on the last BLOCK_K only (else all masked, or EVEN_NK none)
    # N without a tail, K with one, the weights readable to a multiple of BLOCK_K (k_read): x's loads masked on K
    # only; None: not passed
    K_OVERREAD: Optional[bool]
    # E8M0 multipliers without the cases of bytes 0 and 255 (FusedWeights.plain_scales); None: not passed
    PLAIN_SCALES: Optional[bool]
    # the folded NVFP4 multipliers from the hardware's E4M3 conversion (e4m3_convert); only with S_FOLD_EXP
    S_CVT: bool
    SPLIT_K: int
    SPLIT_BLOCKS: int

    def meta(self) -> dict:
        """The kernel's constexprs and compile options, as the launcher passes them."""
        out = dict(KIND=self.KIND, BF16=self.BF16, HAS_POST=self.HAS_POST, RAW_S=self.RAW_S,
                   HAS_BIAS=self.HAS_BIAS, ROW_SCALE=self.ROW_SCALE, DEQUANT_ONLY=self.DEQUANT_ONLY,
                   BLOCK_M=self.BLOCK_M, MMA_ORDER=self.MMA_ORDER, **format_constexprs(self.KIND, self.fmt))
        out.update((k, getattr(self, k)) for k in _LAUNCH_KEYS if getattr(self, k) is not None)
        out.update(act_constexprs(self.ACT))  # only where it acts: other launches keep their keys
        if self.FOLD_BIAS and self.RAW_S:  # NVFP4's folded multiplier (only there: other launches keep their keys)
            out["S_FOLD_EXP"] = fold_exp(hf.get_format(self.fmt))
            if self.S_CVT:
                out["S_CVT"] = True
        return out


def format_constexprs(kind: int, fmt: Optional[str]) -> dict:
    """The weight format's constexprs (element decode, packing, block size,
    the block scale's decode: E8M0, or a two-level row's minifloat)."""
    if kind == 0:
        return dict(PACKED=False, QBLOCK=32, TWO_LEVEL=False, **{k: _NO_ELEMENT[k] for k in _ELEMENT_KEYS},
                    **{"S_" + k: _NO_ELEMENT[k] for k in _ELEMENT_KEYS})
    spec = hf.get_format(fmt)
    if spec.element.is_int:
        raise ValueError(f"{spec.name}: integer elements are not implemented in the fused MoE GEMM "
                         "(use backend='unfused')")
    el = element_constants(spec.element)
    # MX rows never read the S_ constants: they get E4M3's, so every launch has one signature
    sc = element_constants(spec.scale) if spec.is_two_level else _NO_ELEMENT
    return dict(PACKED=spec.is_fp4, QBLOCK=spec.block_size, TWO_LEVEL=spec.is_two_level,
                **{k: el[k] for k in _ELEMENT_KEYS}, **{"S_" + k: sc[k] for k in _ELEMENT_KEYS})


# bf16's largest finite value, (2 - 2^-7) * 2^127
BF16_MAX = (2.0 - 2.0 ** -7) * 2.0 ** 127


def fold_exp(spec) -> int:
    """A two-level row's FOLD_BIAS exponent c: the least c >= 0 for which
    the folded multiplier s * 2^(127 - element bias - c) stays a finite bf16
    for the largest block scale s (nvfp4: 448 = 1.75 * 2^8, so 7). The
    smallest products stay normal bf16 numbers too: e2m1's 0.5 times E4M3's
    2^-9, times 2^-7, is 2^-17, so every folded product is exact."""
    c = 0
    while spec.scale.max_normal * 2.0 ** (127 - spec.element.bias - c) > BF16_MAX:
        c += 1
    return c


# The CUDA compute capability select_launch assumes where it is not given one: sm_90, the lowest CUDA target
# harness.aot compiles for (the launch snapshot and the compile check describe launches there)
DEFAULT_CUDA_CC = (9, 0)
# PTX's cvt.rn.f16x2.e4m3x2 needs sm_89 and cvt.bf16.f16 sm_90
E4M3_CVT_MIN_CC = (9, 0)


def e4m3_convert(spec, cuda_cc) -> bool:
    """Whether a folded two-level GEMM launch (S_FOLD_EXP) on a CUDA device
    of compute capability `cuda_cc` builds its multipliers s x 2^(127 -
    element bias - c) with the hardware's E4M3 conversion: E4M3 (fn) block
    scales over e2m1, where the multiplier is s x 2^119 (the kernel's
    constant), on sm_90 and later. Elsewhere the kernel decodes s by bits."""
    scale = spec.scale
    e4m3 = (scale.name == "e4m3fn" and spec.element.name == "e2m1"
            and 127 - spec.element.bias - fold_exp(spec) == 119)
    return e4m3 and tuple(cuda_cc) >= E4M3_CVT_MIN_CC


def on_rocm() -> bool:
    return torch.version.hip is not None


def vendor_of(device) -> str:
    """"interpreter" for tensors off the GPU (the Triton interpreter runs
    them), else "rocm" or "cuda" by the torch build."""
    if torch.device(device).type != "cuda":
        return "interpreter"
    return "rocm" if on_rocm() else "cuda"


def launch_tables(vendor: Optional[str] = None) -> dict:
    """Which table the GEMM's launches take by operand class on a vendor (by
    default this machine's GPU)."""
    vendor = vendor or ("rocm" if on_rocm() else "cuda")
    return {ops: chain[0] for ops, chain in VENDOR_TABLES[vendor].items()}


def dispatch(vendor: str) -> dict:
    """What the fused GEMM runs on a vendor, for reports: per operand class
    the table it reads and that table's rows (tiles and decode flags: e.g.
    BF16_TRUNC on ROCm), and how e2m1 weights are stored."""
    if vendor not in VENDORS:
        raise ValueError(f"unknown vendor {vendor!r}; expected one of {', '.join(VENDORS)}")
    tables = launch_tables(vendor)
    return {"vendor": vendor, "launch_tables": tables,
            "rows": {ops: {name: row.settings() for name, row in TABLES[table].items()}
                     for ops, table in tables.items()},
            "e2m1_weights": "eight codes to an int32 word (harness/kernels/fp4_words.py), each bf16 pair placed by "
                            "a rotate and a mask (two for one pair of four)",
            "e2m1_word_order": {fmt: word_order(vendor, fmt, fp4_words.GROUP) for fmt in ("mxfp4", "nvfp4")},
            "scale_order": f"block scale bytes [E, N, K / block] in 'k' order (each row's bytes contiguous), or 'n' "
                           f"(stored [E, K / block, N]) where K > {SHORT_K_MAX} and a row is not a multiple of "
                           f"{SCALE_ALIGN} bytes while N is (scale_order; FusedWeights.scale_order per tensor in "
                           "each result row)",
            "swap_mn": "decode rows with SWAP_MN run out^T = W x^T on weights in the 'mma' word order",
            "plain_scales": "MX weights whose E8M0 bytes are at most 128 and 0 only over zero codes "
                            "(FusedWeights.plain_scales, per tensor in each result row) take each multiplier from "
                            "the byte's bits; on CUDA, rows with FOLD_BIAS then fold e2m1's 2^126 into it (one "
                            "packed multiply a pair)",
            "nvfp4_fold": "on CUDA, NVFP4 GEMMs in bf16 on rows with FOLD_BIAS take each E4M3 s times "
                          "2^(126 - S_FOLD_EXP) as the multiplier (one packed multiply a pair) and multiply the dot "
                          "by 2^S_FOLD_EXP before the post factor; on sm_90 and later each s comes from the "
                          "hardware's E4M3 conversion (S_CVT), below from its bits"}


def word_order(vendor: str, fmt: Optional[str], k: int) -> str:
    """The word order (fp4_words.ORDERS) of a weight tensor's e2m1 codes on
    `vendor`: "mma" for MX formats on CUDA where K allows it (their decode
    launches then take the weights as the wgmma's register operand,
    SWAP_MN), else "k". Measured on an H200 (docs/benchmarks.md): MXFP4
    decode GEMMs 1.02-1.11x faster at 16 tokens (0.92-1.10x at one);
    NVFP4's 0.86-1.09x (its E4M3 block multipliers decoded per fragment
    lane; 0.79-1.01x with them converted by the hardware, S_CVT; 0.98-1.02x
    with gpt-oss' scale bytes in order "n", scale_order), so NVFP4
    keeps "k"; ROCm's MFMA
    operand fragments hold four K neighbours, not two, and keep "k"."""
    if vendor not in VENDORS:
        raise ValueError(f"unknown vendor {vendor!r}; expected one of {', '.join(VENDORS)}")
    spec = hf.get_format(fmt) if fmt else None
    if vendor == "cuda" and spec is not None and spec.is_fp4 and spec.is_mx and k % fp4_words.GROUP == 0:
        return "mma"
    return "k"


SCALE_ORDERS = ("k", "n")
# bytes a scale tile's rows are loaded in (16: one vector load, an async copy)
SCALE_ALIGN = 16


def scale_order(n: int, k: int, block: int) -> str:
    """The order a weight tensor's block scale bytes [E, N, K / block] are
    stored in (SCALE_ORDERS): "k", each row's bytes contiguous, unless the
    row (K / block bytes) is not a multiple of SCALE_ALIGN while N is, and
    the K loop is long (K > SHORT_K_MAX): then "n", stored [E, K / block,
    N], each block's N bytes contiguous. A K step's scale tile then loads in
    16-byte pieces and is pipelined like the words; in "k", rows of
    gpt-oss-120b's 90 (MXFP4) or 180 (NVFP4) bytes load a byte at a time,
    waited for every K step (Triton knows only a multiple of 16 as
    aligned). "n" costs instructions where rows are
    aligned (each thread's bytes read one at a time from shared memory: 414
    -> 448 sm_90 instructions a K step of the MXFP4 decode GEMM), and a
    short K loop has little to hide. Measured on an H200 (docs/benchmarks.md):
    gpt-oss-120b's forward 0.82-0.87x as long at T=16 (0.83-1.00x at T=1);
    Qwen3-30B-A3B's forward with its GEMM2 (K 768, MXFP4 rows of 24 bytes)
    in "n" 1.00-1.04x as long, so short loops keep "k". Rows of one byte:
    "k" (the same bytes either way). The same rule on every vendor (not
    timed on an MI300X)."""
    if n <= 0 or k <= 0 or k % block:
        raise ValueError(f"scale_order: N {n}, K {k} and block {block} must be positive, K a multiple of the block")
    rows = k // block
    return "n" if k > SHORT_K_MAX and rows % SCALE_ALIGN and n % SCALE_ALIGN == 0 else "k"


def operands(kind: int, bf16: bool, w_bytes: int) -> str:
    """The tl.dot operand class of a launch: float32 for precision "ieee" and
    for float32 weights, else bf16 (with 2-byte float weights, or with decoded
    codes)."""
    if not bf16 or (kind == 0 and w_bytes == 4):
        return "float32"
    return "bf16, float weights" if kind == 0 else "bf16"


def row_names(launch: str, kind: int, block_m: int, k: int, swap_n: bool = False, long_k: bool = False,
              wide_k: bool = False) -> tuple:
    """The rows a launch can take, preferred first: "small" below BLOCK_M 64,
    else "large" ("large_float" on predequant's scratch); a code-decoding
    GEMM at BLOCK_M 32 with `wide_k` (the transposed product, K stored to a
    multiple of 128: select_launch) prefers "medium", one with a short K
    loop "small_short_k", and at BLOCK_M 64 and up one with `long_k` (the
    transposed product, a long K loop) "large_long_k", else one with
    `swap_n` (the transposed product on "mma" words acts, scale bytes in
    order "n") "large_n"; the dequant pass has its own row."""
    if launch == "dequant":
        return ("dequant",)
    if block_m >= LARGE_BLOCK_M:
        if launch == "scratch_gemm":
            return ("large_float",)
        if launch == "gemm" and kind == 1 and long_k:
            return ("large_long_k", "large")
        return ("large_n", "large") if launch == "gemm" and kind == 1 and swap_n else ("large",)
    if launch == "gemm" and kind == 1 and block_m >= MEDIUM_BLOCK_M and wide_k:
        return ("medium", "small")
    if launch == "gemm" and kind == 1 and 0 < k <= SHORT_K_MAX:
        return ("small_short_k", "small")
    return ("small",)


def table_row(vendor: str, ops: str, names: tuple) -> tuple:
    """(table name, row name, LaunchRow): the first of the vendor's tables for
    the operand class that holds one of `names`, its most preferred one there."""
    for table in VENDOR_TABLES[vendor][ops]:
        for name in names:
            if name in TABLES[table]:
                return table, name, TABLES[table][name]
    raise ValueError(f"no launch table of {vendor} ({ops} operands) has a row {' or '.join(names)}")


def read_k(word_order: str, k: int) -> int:
    """The K a GEMM may read each row of a weight tensor's kernel format to
    (FusedWeights.k_over): e2m1 words in the "mma" order (MX on CUDA,
    word_order) with a long K loop (K >= LONG_K_MIN) that is not a multiple
    of the decode row's BLOCK_K ("small": 256, which "large_long_k"'s and
    "medium"'s 128 divide) are read to the next multiple, so those rows take
    them (K_OVERREAD: one pipelined loop where "small" took K_TAIL's
    unpipelined last step, and the transposed product at BLOCK_M 64 and up
    masks every BLOCK_K of a K with a tail: masks_every_block_k); else K.
    Past a row's K the next row's codes lie, past the last row a few slack
    bytes: gpt-oss-120b's rows of K 2880 are read to 3072 from the
    checkpoint's bytes (a launch reads to its last BLOCK_K: 2944 at 128)."""
    step = GPU_CONFIGS["small"].BLOCK_K
    if word_order == "mma" and k >= LONG_K_MIN and k % step:
        return triton_cdiv(k, step) * step
    return k


def masks_every_block_k(swap_mn, block_m: int) -> bool:
    """Whether a GEMM launch of this SWAP_MN and BLOCK_M masks every BLOCK_K
    of a K with a tail, never K_TAIL: the transposed product at BLOCK_M 64
    and up, which gave wrong sums with K_TAIL on an H200 (triton 3.6: up to
    6% of the output's largest value, gpt-oss' w13 at BLOCK_K 128;
    docs/benchmarks.md), where masks on every BLOCK_K gave the "ieee" sums."""
    return bool(swap_mn) and block_m >= LARGE_BLOCK_M


def act_in_epilogue(swap_mn, block_m: int) -> bool:
    """Whether a GEMM launch that holds every operation before the
    activation applies it in its epilogue (else the split-sum pass after it
    does, fused_gemm._split_sum). In the transposed product (SWAP_MN) only
    at BLOCK_M 64 and up, its tile taking gate and up rows of 8 outputs in
    turn (the wgmma accumulator holds rows r and r + 8 in one thread, so
    the pairs meet without a shuffle; a tile of half gate, half up rows
    needs one across warps at BLOCK_N 64). On an H200 (triton 3.6,
    `python -m tools.act_placement`, epilogue / split-sum pass, outputs
    bitwise equal; docs/benchmarks.md): the W4A16 forward at T=4096 0.984x
    (Qwen3-30B-A3B) and 0.988x (gpt-oss-120b), gpt-oss' GEMM1 with its bias
    and clamped SwiGLU 0.946x; at T=16 the forward 1.004x / 1.015x, so the
    decode rows keep the pass."""
    return not swap_mn or block_m >= LARGE_BLOCK_M


def k_tail(n: int, k: int, block_n: int, block_k: int) -> bool:
    """Whether a GEMM launch takes K_TAIL (the dequant pass, not timed with
    it, masks every BLOCK_K): N without a tail of BLOCK_N, K with one of
    BLOCK_K. Its full BLOCK_Ks then load without masks and only the last,
    partial one with them (fused_gemm_src.py), so a K like gpt-oss-120b's
    (2880 = 11 x 256 + 64) keeps the row's BLOCK_K. Measured on an H200
    (docs/benchmarks.md): against BLOCK_K 64, the largest power of two
    dividing 2880 and the tile taken before, the "small" row's 256 with
    the tail ran its decode GEMMs 0.77-1.12x as long (w_mxfp4, nvfp4; T=1,
    16); every BLOCK_K masked had run the forward 1.14-1.35x longer."""
    return n > 0 and n % block_n == 0 and k % block_k != 0


def set_row(table: str, row: str, value: LaunchRow) -> LaunchRow:
    """The process-wide override: every later launch that takes `row` of
    `table` takes `value` instead. Returns the row it replaced (to restore it)."""
    if table not in TABLES or row not in TABLES[table]:
        raise ValueError(f"no launch row {table}[{row!r}]")
    if not isinstance(value, LaunchRow):
        raise TypeError(f"set_row takes a LaunchRow, got {type(value).__name__}")
    old = TABLES[table][row]
    TABLES[table][row] = value
    return old


def select_launch(launch: str, vendor: str, *, kind: int, n: int, k: int, fmt: Optional[str] = None,
                  bf16: bool = False, has_post: bool = False, block_m: int = DEQUANT_BLOCK_M, w_bytes: int = 1,
                  pairs: int = 0, experts: int = 0, sm_count: Optional[int] = None,
                  bias: bool = False, row_scale: bool = False, override: Optional[Mapping] = None,
                  word_order: str = "k", plain_scales: bool = False,
                  cuda_cc: Optional[tuple] = None, scale_order: str = "k", act: int = 0,
                  k_read: Optional[int] = None) -> LaunchConfig:
    """The launch configuration of one launch (LAUNCHES) on `vendor` (VENDORS).

    kind: the weights it reads (0 float, 1 element codes of `fmt`); bf16: tl.dot
    operands in bf16 (for "dequant": it writes a bf16 scratch); has_post: the
    post factor after the dot; block_m: BLOCK_M of the pair layout; n, k: the
    GEMM's N and K (0 where unknown: the compile check); w_bytes: bytes per
    stored weight element. The K split: SPLIT_K of the override, else
    split_k.split_k from pairs, experts and sm_count (no split without an SM
    count: the interpreter, the compile check). bias / row_scale: the caller
    wants h + bias[e] and then h * row_scale[pair] after the GEMM; the
    epilogue does them (HAS_BIAS / ROW_SCALE) in one split only, and the bias
    never after a post factor (a multiply then an add may be contracted into
    an FMA): what the launch leaves, the split-sum pass after it does, the
    bits of the same torch ops.
    word_order: the e2m1 weights' word order (FusedWeights.word_order); a
    row's SWAP_MN acts only on GEMM launches over "mma" words. plain_scales:
    the weights' FusedWeights.plain_scales, which sets PLAIN_SCALES on
    launches that decode MX codes (never an override: it holds only for
    weights whose scale bytes were checked). cuda_cc: the compute capability
    of the CUDA device the launch runs on (None: DEFAULT_CUDA_CC); it decides
    S_CVT (e4m3_convert). scale_order: the order of the weights' scale bytes
    (FusedWeights.scale_order; SCALE_ORDERS), which picks the row at BLOCK_M
    64 and up ("large_n", row_names). act: the activation code (ACT_CODES)
    the caller wants applied after the bias and row scale, on weights of 2N
    rows, gate then up (n: those 2N); the epilogue applies it (ACT) where it
    holds all the operations before it and act_in_epilogue allows, else the
    split-sum pass after the GEMM does. k_read: the K each weight row may
    be read to (FusedWeights.k_read; None: k), finite weights past k: a
    multiple of the row's BLOCK_K lets a GEMM launch take K_OVERREAD, and of
    "large_long_k"'s lets a long K loop take that row."""
    if launch not in LAUNCHES:
        raise ValueError(f"unknown launch {launch!r}; expected one of {', '.join(LAUNCHES)}")
    if vendor not in VENDORS:
        raise ValueError(f"unknown vendor {vendor!r}; expected one of {', '.join(VENDORS)}")
    if launch == "scratch_gemm" and kind != 0:
        raise ValueError("the GEMM on predequant's scratch reads float weights (kind 0)")
    override = dict(override or {})
    unknown = sorted(set(override) - set(OVERRIDABLE))
    if unknown:
        raise ValueError(f"launch override sets {', '.join(unknown)}; it may set {', '.join(OVERRIDABLE)}")
    dequant = launch == "dequant"
    if dequant and override.get("SPLIT_K") is not None:
        raise ValueError("the dequant pass has no K split (SPLIT_K)")
    interpret = vendor == "interpreter"
    bm = DEQUANT_BLOCK_M if dequant else block_m
    if scale_order not in SCALE_ORDERS:
        raise ValueError(f"unknown scale order {scale_order!r}; expected one of {', '.join(SCALE_ORDERS)}")
    if kind == 1 and hf.get_format(fmt).is_fp4:
        fp4_words.check_order(word_order, k, "select_launch")
    mma_order = kind == 1 and hf.get_format(fmt).is_fp4 and word_order == "mma"
    swap_n = bf16 and mma_order and scale_order == "n"  # where "large_n"'s transposed product acts
    k_read = k if k_read is None else k_read
    if not isinstance(k_read, int) or k_read < k:
        raise ValueError(f"select_launch: weights readable to K {k_read!r}, fewer than the GEMM's K {k}")
    long_k = bf16 and mma_order and k >= LONG_K_MIN and k_read % GPU_CONFIGS["large_long_k"].BLOCK_K == 0
    wide_k = bf16 and mma_order and k > 0 and k_read % GPU_CONFIGS["medium"].BLOCK_K == 0
    table, name, row = table_row(vendor, operands(kind, bf16, w_bytes),
                                 row_names(launch, kind, bm, k, swap_n, long_k, wide_k))
    cfg = asdict(row)
    cfg.update((f, v) for f, v in override.items() if f in cfg)
    if cfg["maxnreg"] is not None and (not isinstance(cfg["maxnreg"], int) or not MAXNREG_MIN <= cfg["maxnreg"] <= 255):
        raise ValueError(f"launch config maxnreg must be an int in [{MAXNREG_MIN}, 255], got {cfg['maxnreg']!r}")
    if vendor != "cuda":  # a PTX register cap: other targets' compilers take no such option
        cfg["maxnreg"] = None
    if interpret:
        cfg.update(num_warps=None, num_stages=None)
        if dequant:  # an override's tile is for the GPU: the interpreter's dequant pass keeps its row's
            cfg.update(BLOCK_N=row.BLOCK_N, BLOCK_K=row.BLOCK_K)
    if kind == 0 and not dequant:  # float weights are not decoded
        cfg.update(dict.fromkeys(DECODE_FLAGS))
    if not bf16:  # "ieee" multipliers (fl32(s / gs)) are not exact in bf16
        cfg["BF16_DECODE"] = None
    if not cfg["BF16_DECODE"]:  # how BF16_DECODE multiplies
        cfg["BF16_TRUNC"] = None
    # the folded multiply: inline PTX on e2m1 words in bf16 multiplies, whose scale bytes are plain (MX, at most
    # 128) or NVFP4's E4M3 in a GEMM launch (its 2^S_FOLD_EXP given back with the post factor)
    plain = bool(plain_scales) and kind == 1 and hf.get_format(fmt).is_mx
    s_fold = kind == 1 and hf.get_format(fmt).is_two_level and bf16 and has_post and not dequant
    if not (vendor == "cuda" and (plain or s_fold) and hf.get_format(fmt).is_fp4 and cfg["BF16_DECODE"]
            and not cfg["BF16_TRUNC"]):
        cfg["FOLD_BIAS"] = None
    if interpret and cfg["BF16_DECODE"] and not cfg["BF16_TRUNC"]:
        # The Triton interpreter's bf16 arithmetic is wrong (0x8040 * 2^126 gave -2^-63, not -0.5; triton 3.9).
        raise ValueError("launch flag BF16_DECODE needs a CUDA/ROCm device: the Triton interpreter (CPU) does not "
                         "compute bf16 arithmetic correctly")
    format_constexprs(kind, fmt)  # refuses a format the kernel does not decode
    if word_order not in fp4_words.ORDERS:  # named even where it has no effect (float weights, wider codes)
        fp4_words.check_order(word_order, k, "select_launch")
    # the transposed product: on "mma" words, in bf16 GEMMs (the float32 "ieee" dot only where an override asks:
    # the interpreter's tests of the same code)
    if dequant or not mma_order or not (bf16 or override.get("SWAP_MN")):
        cfg["SWAP_MN"] = None
    even_nk = override.get("EVEN_NK")
    if even_nk is None:
        even_nk = n % cfg["BLOCK_N"] == 0 and k % cfg["BLOCK_K"] == 0
    tail = override.get("K_TAIL")
    swapped_large = not dequant and masks_every_block_k(cfg["SWAP_MN"], bm)  # refuses K_TAIL
    if tail and swapped_large:
        raise ValueError(f"launch config K_TAIL with SWAP_MN at BLOCK_M {bm} (>= {LARGE_BLOCK_M}): the transposed "
                         f"product there masks every BLOCK_K")
    over = override.get("K_OVERREAD")
    if over is None:  # the weights readable past K cover its last BLOCK_K: one loop, x's loads masked
        over = ("EVEN_NK" not in override and "K_TAIL" not in override and not dequant and not even_nk
                and n % cfg["BLOCK_N"] == 0 and k_read > k and k_read % cfg["BLOCK_K"] == 0)
    elif over and (dequant or even_nk or tail or k_read % cfg["BLOCK_K"]):
        raise ValueError(f"launch config K_OVERREAD needs a GEMM launch with a K tail (not EVEN_NK or K_TAIL) on "
                         f"weights readable to a multiple of BLOCK_K {cfg['BLOCK_K']}; got {launch}, K {k} readable to "
                         f"{k_read}")
    if tail is None:  # an override's EVEN_NK=False asks for masks on every BLOCK_K
        tail = ("EVEN_NK" not in override and not dequant and not swapped_large and not over
                and k_tail(n, k, cfg["BLOCK_N"], cfg["BLOCK_K"]))
    if tail and even_nk:
        raise ValueError("launch config K_TAIL and EVEN_NK exclude each other")
    k_blocks = triton_cdiv(k, cfg["BLOCK_K"])
    splits = override.get("SPLIT_K")
    if splits is None:
        splits = 1 if dequant or sm_count is None else split_k(
            pairs, experts, triton_cdiv(n, cfg["BLOCK_N"]), k, bm, cfg["BLOCK_K"], sm_count)
    elif not isinstance(splits, int) or splits < 1:
        raise ValueError(f"launch config SPLIT_K must be an int >= 1, got {splits!r}")
    split_blocks = triton_cdiv(k_blocks, splits)
    if split_blocks:
        splits = triton_cdiv(k_blocks, split_blocks)  # no empty split
    folded_s = bool(cfg["FOLD_BIAS"]) and s_fold  # the kernel's S_FOLDED (meta passes S_FOLD_EXP)
    s_cvt = folded_s and e4m3_convert(hf.get_format(fmt), DEFAULT_CUDA_CC if cuda_cc is None else cuda_cc)
    act_constexprs(act)  # refuses an unknown code
    if act and (dequant or cfg["BLOCK_N"] % 2):
        raise ValueError(f"activation code {act} needs a GEMM launch with an even BLOCK_N (gate and up halves), got "
                         f"{launch} BLOCK_N {cfg['BLOCK_N']}")
    one_split = splits == 1 and not dequant
    in_bias = bias and one_split and not has_post
    in_rs = row_scale and one_split and (in_bias or not bias)
    return LaunchConfig(launch=launch, vendor=vendor, table=table, row=name, fmt=None if kind == 0 else fmt,
                        KIND=kind, BF16=bf16 and not dequant, HAS_POST=has_post and not dequant,
                        # the row scale comes after the bias: in the kernel only if the bias is there too (or none)
                        HAS_BIAS=in_bias, ROW_SCALE=in_rs,
                        # the activation after them: in the kernel only if they are there too (or not asked
                        # for), and not in the transposed product's decode rows (act_in_epilogue)
                        ACT=act if (one_split and (in_bias or not bias) and (in_rs or not row_scale)
                                    and act_in_epilogue(cfg["SWAP_MN"], bm)) else 0,
                        RAW_S=bf16 and kind == 1 and hf.get_format(fmt).is_two_level,
                        DEQUANT_ONLY=dequant, BLOCK_M=bm, **cfg, MMA_ORDER=mma_order, EVEN_NK=even_nk,
                        K_TAIL=bool(tail), K_OVERREAD=True if over else None,
                        PLAIN_SCALES=True if plain else None, S_CVT=s_cvt, SPLIT_K=splits,
                        SPLIT_BLOCKS=split_blocks)


def resolve_mode(mode: str, vendor: str, kind: int, pairs: int, experts: int) -> str:
    """Mode "auto": "predequant" on a GPU for element codes once an expert
    averages PREDEQUANT_MIN_ROWS_PER_EXPERT pairs, else "fused"."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if mode != "auto":
        return mode
    many = pairs >= PREDEQUANT_MIN_ROWS_PER_EXPERT * experts
    return "predequant" if vendor != "interpreter" and kind == 1 and many else "fused"
