"""One-pass elementwise helpers of the fused backend on CUDA (Triton), each
bit for bit the torch ops it replaces, so the fused and unfused paths still
share every value outside the GEMMs (contract (3) in fused.py).

silu_and_mul (activations.silu_and_mul on float32): ATen's CUDA silu is
x / (1 + expf(-x)) in float32 with IEEE division (ATen is built without fast
math), materialised, then one float32 multiply by `up`. Here: libdevice's
expf (the CUDA math library's expf, which ATen's compiles to), div_rn, no FMA
contraction; one read of h and one write instead of two kernels and an
intermediate (~0.5 ms less GPU kernel time per Mixtral T=4096 forward,
docs/benchmarks.md).

swiglu_clamp (activations.swiglu_clamp on float32, gpt-oss's clamped
SwiGLU): ATen's clamp (NaN returned as it is), alpha * gate with alpha
rounded to float32 as ATen rounds a Python scalar, ATen's CUDA sigmoid 1 /
(1 + expf(-z)) with IEEE division, then the float32 products and sum in the
expression's order, no FMA contraction: seven elementwise kernels in one
pass.

topk_sum (harness.moe.combine.topk_sum: the k products of each token added
in slot order from +0.0 in float32, then cast): torch runs it as k adds and
a cast, or as torch.sum and a cast in another order.

scale_to_bf16 ((x * g).to(bfloat16), nvfp4's x * gs_a before the bf16 GEMM):
torch runs it as two passes, or as one slow mixed-dtype pass with out=.

suites/properties/test_moe_gpu.py compares the bits with torch on the device,
edge values included (+-0, +-Inf, NaN, exp overflow, subnormals, bf16 ties).
"""
from __future__ import annotations

import torch

# gpt-oss's clamped SwiGLU constants (harness.moe.activations reads them from here: kernels are the floor below)
from harness.kernels.constants import SWIGLU_ALPHA, SWIGLU_LIMIT
from harness.kernels.launch import triton_cdiv
from harness.kernels.loader import kernels

__all__ = ["ACTIVATIONS", "SWIGLU_ALPHA", "SWIGLU_LIMIT", "scale_to_bf16", "silu_and_mul", "swiglu_clamp",
           "topk_sum"]

BLOCK = 1024
# Launch constexprs and compile options (fused_aot.py compiles the same).
SILU_META = dict(BLOCK=BLOCK, num_warps=4, enable_fp_fusion=False)
SCALE_META = dict(BLOCK=4096, num_warps=8, enable_fp_fusion=False)
SUM_META = dict(BLOCK=512, UNROLL=8, num_warps=4, enable_fp_fusion=False)
SUM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _kernel():
    """silu_and_mul_kernel (fused_act_src.py), compiled."""
    return kernels(False, "fused_act_src").silu_and_mul_kernel


def _swiglu_kernel():
    """swiglu_clamp_kernel (fused_act_src.py), compiled."""
    return kernels(False, "fused_act_src").swiglu_clamp_kernel


def _sum_kernel():
    """topk_sum_kernel (fused_act_src.py), compiled."""
    return kernels(False, "fused_act_src").topk_sum_kernel


def _scale_kernel():
    """scale_to_bf16_kernel (fused_act_src.py), compiled."""
    return kernels(False, "fused_act_src").scale_to_bf16_kernel


def _check_gate_up(name: str, h: torch.Tensor, out_dtype: torch.dtype) -> None:
    if h.device.type != "cuda" or h.dtype != torch.float32 or h.dim() != 2:
        raise ValueError(f"fused {name} takes a 2-D float32 CUDA tensor, got {h.dtype} {tuple(h.shape)} "
                         f"on {h.device}")
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"fused {name} writes float32 or bfloat16, got {out_dtype}")


def _gate_up_launch(kernel, h: torch.Tensor, bf16: bool, *scalars) -> torch.Tensor:
    """One program per row and BLOCK columns of h [P, 2I] -> [P, I]."""
    P, two_i = h.shape
    inter = two_i // 2
    if h.stride(1) != 1:
        h = h.contiguous()
    out = torch.empty(P, inter, dtype=torch.bfloat16 if bf16 else torch.float32, device=h.device)
    if P and inter:
        kernel[(P, triton_cdiv(inter, BLOCK))](h, out, inter, h.stride(0), out.stride(0), *scalars, **SILU_META)
    return out


def _gate_up_fake(h, bf16):
    return h.new_empty((h.shape[0], h.shape[1] // 2), dtype=torch.bfloat16 if bf16 else torch.float32)


def silu_and_mul(h: torch.Tensor, out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """h [P, 2I] float32 on CUDA (gate then up) -> silu(gate) * up [P, I] in
    `out_dtype`: float32, or bfloat16 = the float32 result .to(bfloat16) (the
    next GEMM's bf16 operand, without a float32 intermediate and a second
    pass). A torch.library custom op, opaque to torch.compile (as moe_gemm)."""
    _check_gate_up("silu_and_mul", h, out_dtype)
    return _silu_and_mul_op(h, out_dtype == torch.bfloat16)


@torch.library.custom_op("moe_harness::silu_and_mul", mutates_args=())
def _silu_and_mul_op(h: torch.Tensor, bf16: bool = False) -> torch.Tensor:
    return _gate_up_launch(_kernel(), h, bf16)


@_silu_and_mul_op.register_fake
def _silu_and_mul_fake(h, bf16=False):
    return _gate_up_fake(h, bf16)


def swiglu_clamp(h: torch.Tensor, out_dtype: torch.dtype = torch.float32, limit: float = SWIGLU_LIMIT,
                 alpha: float = SWIGLU_ALPHA) -> torch.Tensor:
    """h [P, 2I] float32 on CUDA (gate then up) -> activations.swiglu_clamp(h,
    limit, alpha) [P, I] in `out_dtype` (bfloat16: the float32 result
    .to(bfloat16)), bit for bit, in one pass. A custom op, as silu_and_mul."""
    _check_gate_up("swiglu_clamp", h, out_dtype)
    return _swiglu_clamp_op(h, out_dtype == torch.bfloat16, float(limit), float(alpha))


@torch.library.custom_op("moe_harness::swiglu_clamp", mutates_args=())
def _swiglu_clamp_op(h: torch.Tensor, bf16: bool, limit: float, alpha: float) -> torch.Tensor:
    return _gate_up_launch(_swiglu_kernel(), h, bf16, limit, alpha)


@_swiglu_clamp_op.register_fake
def _swiglu_clamp_fake(h, bf16, limit, alpha):
    return _gate_up_fake(h, bf16)


# The activations (harness.moe.activations' names) with a one-pass kernel, each (h, out_dtype) -> [P, I]
ACTIVATIONS = {"silu": silu_and_mul, "swiglu_clamp": swiglu_clamp}


def scale_to_bf16(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """(x * g).to(bfloat16) in one pass, x float32 contiguous on CUDA, g a
    float32 scalar tensor: the float32 product, then round-to-nearest-even,
    the bits of the two torch ops (NaN payloads aside), without the float32
    intermediate (nvfp4's x * gs_a before the bf16 GEMM)."""
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    n = x.numel()
    if n:
        grid = (triton_cdiv(n, SCALE_META["BLOCK"]),)
        _scale_kernel()[grid](x, g.reshape(1), out, n, **SCALE_META)
    return out


def topk_sum(h: torch.Tensor, k: int, out_dtype: torch.dtype) -> torch.Tensor:
    """h [T k, H] float32 on CUDA (pair t k + j: token t's slot j) -> [T, H]
    in out_dtype: harness.moe.combine.topk_sum(h.reshape(T, k, H),
    out_dtype) bit for bit, in one pass. A custom op, as silu_and_mul."""
    if h.device.type != "cuda" or h.dtype != torch.float32 or h.dim() != 2 or k < 1 or h.shape[0] % k:
        raise ValueError(f"fused topk_sum takes [T k, H] float32 on CUDA with k >= 1 dividing its rows, got "
                         f"{h.dtype} {tuple(h.shape)} on {h.device}, k={k}")
    if out_dtype not in SUM_DTYPES:
        raise ValueError(f"fused topk_sum writes one of {SUM_DTYPES}, got {out_dtype}")
    return _topk_sum_op(h, int(k), out_dtype)


@torch.library.custom_op("moe_harness::topk_sum", mutates_args=())
def _topk_sum_op(h: torch.Tensor, k: int, out_dtype: torch.dtype) -> torch.Tensor:
    h = h.contiguous()
    T, H = h.shape[0] // k, h.shape[1]
    out = torch.empty(T, H, dtype=out_dtype, device=h.device)
    if T and H:
        _sum_kernel()[(T, triton_cdiv(H, SUM_META["BLOCK"]))](h, out, H, k, **SUM_META)
    return out


@_topk_sum_op.register_fake
def _topk_sum_fake(h, k, out_dtype):
    return h.new_empty((h.shape[0] // k, h.shape[1]), dtype=out_dtype)
