"""Triton emulation kernels, bit-exact to the reference (harness.formats).

    import harness.kernels as hk
    y = hk.qdq(x, "mxfp4", scale_mode="even", backend="auto")
    q = hk.quantize(x, "nvfp4", global_scale=gs)        # hf.QuantizedTensor
    packed, scales = hk.quantize_packed(x, "mxfp4")     # storage layout
    x2 = hk.dequantize(q, torch.bfloat16)
    w = hk.dequantize_weights(stored, scales, gs, "nvfp4", torch.bfloat16)

backend="triton" on CPU tensors runs the Triton interpreter with no
environment set-up: harness.kernels.loader executes every kernel source a
second time with TRITON_INTERPRET=1 set only around that import, so compiled
and interpreted kernels coexist in one process (tests need no subprocess and
no conftest variable). The interpreter's own bf16 casts are wrong (truncating
downcast, mangled subnormals), so interpreted kernels convert bf16 on the bits.

All of the project's Triton lives here. Kernel sources: triton_src (element
codec, with the one element decoder, and the emulation kernels),
fused_gemm_src (the MoE experts' fused dequant + grouped GEMM),
fused_act_src (one-pass elementwise helpers). Host code: constants
(constexprs from the format table), loader (the one loader: compiled vs
interpreted copies), launch (emulation launches), ops (torch.library custom
ops moe_harness::*), api (these functions), fused_act and the fused MoE
GEMM: fused_gemm (moe_gemm), launch_config (launch tables and the one
launch selector), split_k, pair_layout (with moe_align), fused_weights,
precision, error_bound (its numerics contract). The ahead-of-time compile
check is harness.aot.
"""
from harness.kernels.api import BACKENDS, dequantize, dequantize_weights, qdq, quantize, quantize_packed, resolve_backend
from harness.kernels.ops import OPS, dequantize_op, qdq_op, quantize_op

__all__ = [
    "BACKENDS",
    "OPS",
    "dequantize",
    "dequantize_op",
    "dequantize_weights",
    "qdq",
    "qdq_op",
    "quantize",
    "quantize_op",
    "quantize_packed",
    "resolve_backend",
]
