"""Triton kernel source: the fused backend's one-pass elementwise kernels.

Host code and what each computes bit for bit: fused_act.py. Loaded by
harness.kernels.loader like every kernel source; only the compiled copy is
launched (CUDA tensors).
"""
import os

import triton
import triton.language as tl
from triton.language.extra import libdevice

# Which copy this is: the loader executes each source once per kind, with TRITON_INTERPRET set to match
# (loader.py). The interpreter has no libdevice (its functions are stubs there).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

if INTERPRETED:
    @triton.jit
    def _expf(x):
        return tl.exp(x)  # numpy's float32 exp (the epilogue's CPU tests compute their reference the same way)
else:
    @triton.jit
    def _expf(x):
        return libdevice.exp(x)  # the device math library's expf, as ATen's exp: not tl.exp's approximation


# The activations of gate and up (float32), shared by the one-pass kernels below and the GEMM's epilogue and
# split-sum pass (fused_gemm_src.py: _act), so all compute the same bits (every launch compiles without FMA
# contraction).
@triton.jit
def _silu_mul(gate, up):
    # ATen's CUDA silu: x / (1 + expf(-x)) in float32, IEEE division; then the float32 product
    return tl.math.div_rn(gate, 1.0 + _expf(-gate)) * up


@triton.jit
def _swiglu_clamp(gate, up, limit, alpha):
    # ATen's clamp returns a NaN input as it is, else min / max of it and the bound(s)
    gate = tl.where(gate != gate, gate, tl.minimum(gate, limit))
    up = tl.where(up != up, up, tl.minimum(tl.maximum(up, -limit), limit))
    # ATen's CUDA sigmoid: 1 / (1 + expf(-z)) in float32, IEEE division
    sig = tl.math.div_rn(1.0, 1.0 + _expf(-(alpha * gate)))
    return (up + 1.0) * (gate * sig)


@triton.jit
def silu_and_mul_kernel(h_ptr, out_ptr, inter, stride_h, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < inter
    gate = tl.load(h_ptr + row * stride_h + cols, mask=m, other=0.0)
    up = tl.load(h_ptr + row * stride_h + inter + cols, mask=m, other=0.0)
    # a bf16 output rounds the float32 result once, to nearest even (torch's .to(bfloat16))
    tl.store(out_ptr + row * stride_o + cols, _silu_mul(gate, up).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def swiglu_clamp_kernel(h_ptr, out_ptr, inter, stride_h, stride_o, limit, alpha, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < inter
    gate = tl.load(h_ptr + row * stride_h + cols, mask=m, other=0.0)
    up = tl.load(h_ptr + row * stride_h + inter + cols, mask=m, other=0.0)
    out = _swiglu_clamp(gate, up, limit, alpha)
    tl.store(out_ptr + row * stride_o + cols, out.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def scale_to_bf16_kernel(x_ptr, g_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(out_ptr + offs, (x * tl.load(g_ptr)).to(tl.bfloat16), mask=m)


@triton.jit
def topk_sum_kernel(h_ptr, out_ptr, H, k, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    # out[t] = ((+0 + h[t k]) + h[t k + 1]) + ... in float32, rounded once to the output's dtype. UNROLL slots'
    # loads are issued before their adds; a slot past k loads 0.0, which leaves the sum as it is (it starts
    # from +0.0 and so is never -0.0)
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < H
    acc = tl.zeros((BLOCK,), tl.float32)
    for j0 in range(0, k, UNROLL):
        for jj in tl.static_range(UNROLL):
            acc += tl.load(h_ptr + (t * k + j0 + jj) * H + cols, mask=m & (j0 + jj < k), other=0.0)
    tl.store(out_ptr + t * H + cols, acc.to(out_ptr.dtype.element_ty), mask=m)
