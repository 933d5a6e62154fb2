"""The numerics contract of the fused MoE GEMM (fused_gemm.py, kernel in
fused_gemm_src.py) and its error bound (what the suites test):

1. Dequantization is BIT-EXACT. The kernel decodes element codes with the
   emulation kernels' element decoder (triton_src._decode: exact bit
   construction, Inf/NaN codes, -0.0 codes stay -0.0) and multiplies by the
   same float32 per-block multiplier as harness.formats (2^(byte-127) for
   MX, fl32(s / gs[e]) for two-level formats), decoded in the kernel from
   the checkpoint's scale byte (the E4M3 s by the same element decoder, the
   division IEEE-rounded). `fused_dequantize(fw)` runs
   exactly the kernel's dequant code and equals harness.formats.dequantize
   bitwise for every format row, element code and scale byte
   (suites/properties/test_kernels_fused_gemm.py, Triton interpreter; the
   GPU suite checks it on the device). FAST_DECODE (the tuned tables' choice)
   relies on float32 denormals for subnormal codes; BYTE_DECODE builds the
   same bits for e2m1 from each pair's bits in the word layout of
   fp4_words.py (a rotate and a mask per two codes for three of a word's
   four pairs), under the same tests. BF16_DECODE (GPU only: the interpreter's
   bf16 arithmetic is wrong) takes those pairs as bf16, two codes per 32-bit
   operation, and scales in bf16 -- exact wherever it acts,
   in launches with bf16 operands: e2m1 x 2^k and e2m1 x E4M3 s (precision
   "bf16" keeps nvfp4's raw s) need at most 6 significant bits of bf16's 8,
   so each product is rounded once, as the float32 decode's conversion to
   bf16 rounds it; the GPU suite holds it bitwise equal to the reference for
   every code and scale byte. BF16_TRUNC (ROCm's tables: no packed bf16
   multiply there) computes the same products in float32 and keeps their top
   16 bits, the same bits since each product is a bf16 number; it needs no
   bf16 arithmetic, so the interpreter holds it too (every code and scale
   byte of the bf16 dequant pass). FOLD_BIAS (CUDA's decode rows, inline
   PTX) multiplies each pair of bf16 patterns by one folded multiplier: MX's
   2^(b - 127) times e2m1's 2^126, or NVFP4's s times 2^(126 - 7) (exact:
   a power of two on 4 significant bits, finite for every E4M3 s, each
   product e2m1 * s * 2^-7 a normal bf16 number), whose 2^7 the GEMM gives
   back to the float32 sum before the post factor: the same bits wherever
   the products stay above float32's subnormals, as (2) assumes. On sm_90
   and later (S_CVT) NVFP4's s comes from the hardware's E4M3 -> f16
   conversion and f16 -> bf16 (both exact for every E4M3 byte, NaN kept),
   times 2^119 in bf16 (exact): the same multiplier.

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
       per product, bounded loosely) and for any lossy bf16 use. "auto" picks
       one on a GPU: the weight-only rows (W4A16, W8A16), whose float32 GEMM
       input is rounded to bf16 in the kernel (round to nearest even, 8
       significant bits: relative error <= 2^-8) against MX weights exact in
       bf16, so each product is off by <= 2^-8 relative before the float32
       accumulation -- what triton_kernels and vLLM's W4A16 paths compute,
       whose intermediate between the GEMMs is stored as bf16. fp8 per-tensor
       and unquantized activations forced to "bf16" are bounded the same way;
       "auto" keeps them "ieee". Like gamma_K, the relative term assumes no
       underflow (operands above 2^-126).
   `gemm_error_bound` computes the right-hand side per element.

3. End to end, fused and unfused share routing, the same
   moe_kernel_quantize_input calls and the same top-k sum; the only
   difference is (2). a2 QDQ is discontinuous: a GEMM1 difference within (2)
   can move an a2 element across a rounding boundary, so end-to-end
   comparisons must allow one a2 quantization step per element, or compare
   per GEMM with the bound (harness.testing.checks.stages does it stage by stage).
"""
from __future__ import annotations

import torch

from harness.formats.spec import U32

U = U32


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
