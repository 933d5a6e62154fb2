"""The production peer of `bench moe`: OpenAI's triton_kernels MXFP4 MoE
(`matmul_ogs`, the gpt-oss path of vLLM's TRITON backend), timed in the same
run on the same bf16 weights, so every harness row has a ratio to what a user
runs in production.

The peer is built by the conformance adapter (harness/conformance/moe/
triton_kernels_moe.py) exactly as `conform --moe triton-kernels-w4a16` holds
it to the float64 reference: routing, MXFP4 w13 GEMM with gather and fused
clamped SwiGLU, MXFP4 w2 GEMM with scatter and the router weights, bf16
activations in and out (W4A16), weights swizzled once at build into the
device's MXFP4 value / scale layouts.

`--peer auto` times it where it can run (a CUDA GPU and an importable
triton_kernels) and otherwise says why in the report; `--peer none` leaves
it out; `--peer DIR` names a folder holding the `triton_kernels` package and
is an error (exit 2) when the peer cannot be built from it.
"""
from __future__ import annotations

from pathlib import Path

import torch

import harness.formats as hf
from harness.conformance.moe import triton_kernels_moe as tk_moe
from harness.conformance.moe.protocol import MoEConfig, Unavailable
from harness.conformance.moe.weights import interleave_gate_up
from harness.moe.schemes import get_scheme

SCHEME = tk_moe.SCHEME  # w_mxfp4: MXFP4 weights, bf16 activations
COMPUTES = ("triton_kernels matmul_ogs, W4A16 (MXFP4 weights in the device's swizzled layouts, bf16 "
            "activations): softmax top-k routing with renormalize, w13 GEMM with gather and clamped SwiGLU "
            "(alpha 1.702, limit 7) fused in its epilogue, w2 GEMM with scatter and the router weights, bf16 out")
# Targets against the peer's row of the same shape and T: the same work
# (W4A16) at most as long; activation-QDQ schemes at most 1.25x it.
MAX_VS_PEER_W4A16 = 1.0
MAX_VS_PEER_ACT_QDQ = 1.25


class PeerError(ValueError):
    """`--peer DIR` was given and the peer cannot be built from it (one line)."""


def resolve(choice: str, device: torch.device):
    """(triton_kernels namespace or None, origin, reason it is absent or None)."""
    if choice == "none":
        return None, None, "left out (--peer none)"
    try:
        if choice == "auto":
            root, origin = tk_moe.locate()
        else:
            root = Path(choice)
            if not (root / "triton_kernels" / "__init__.py").is_file():
                raise Unavailable(f"no triton_kernels package in {root} (expected {root}/triton_kernels/__init__.py)")
            origin = f"--peer {root}"
        if device.type != "cuda":
            raise Unavailable(f"triton_kernels runs on a CUDA GPU only (device here: {device.type})")
        return tk_moe.load(root), origin, None
    except Unavailable as e:
        if choice != "auto":
            raise PeerError(f"bench moe: --peer {choice}: {e}") from None
        return None, None, str(e)


def peer_weights(w13: torch.Tensor, w2: torch.Tensor) -> dict:
    """bf16 w13 [E, 2I, H] (gate then up) and w2 [E, H, I] -> the peer's
    weights in vLLM's names: MXFP4 codes packed two a byte, E8M0 scale bytes,
    w13 rows gate/up interleaved (what its SwiGLU reads). Quantized as the
    harness' w_mxfp4 row quantizes them, so both time the same codes."""
    s = get_scheme(SCHEME)

    def q(w):
        return hf.quantize(w.float(), s.weight_fmt, scale_mode=s.scale_mode)

    q13, q2 = q(w13), q(w2)
    return {"w13_weight": hf.pack_fp4(interleave_gate_up(q13.codes)).contiguous(),
            "w13_weight_scale": interleave_gate_up(q13.scales).contiguous(),
            "w2_weight": hf.pack_fp4(q2.codes).contiguous(), "w2_weight_scale": q2.scales.contiguous()}


def build(tk, w13: torch.Tensor, w2: torch.Tensor, top_k: int):
    """The peer's forward(hidden bf16 [T, H], router logits [T, E]) -> [T, H] bf16."""
    E, two_i, H = w13.shape
    s = get_scheme(SCHEME)
    cfg = MoEConfig(scheme=SCHEME, weight_format=s.weight_fmt, activation_format=None, scale_mode=s.scale_mode,
                    num_experts=E, top_k=top_k, hidden_size=H, intermediate_size=two_i // 2,
                    routing="softmax_renorm", scoring="softmax", renormalize=True, activation="swiglu_clamp",
                    dtype=torch.bfloat16, device=str(w13.device), conventions=dict(tk_moe.CONVENTIONS))
    return tk_moe.make_build(tk)(peer_weights(w13, w2), cfg)


def target(scheme: str, best: float, peer_best) -> dict:
    """The peer target of a harness row (its "auto" path), with its verdict."""
    limit = MAX_VS_PEER_W4A16 if get_scheme(scheme).weight_only else MAX_VS_PEER_ACT_QDQ
    out = {"peer_target": f"<= {limit}x triton_kernels W4A16"}
    out["peer_target_met"] = None if peer_best is None else best <= limit * peer_best
    return out
