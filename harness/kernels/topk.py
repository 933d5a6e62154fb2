"""The routing's top-k selection in one launch: the indices of the k largest
keys of each row, ties to the lower index -- the first k of a stable
descending torch.sort, bit for bit (a test holds them equal on ties, +-0,
+-Inf and NaN, which the sort ranks above +Inf).

Each key's float32 bits become an int32 whose order is the float order (-0.0
as +0.0, every NaN the largest), shifted left past the index bits and joined
with (2^IDX_BITS - 1 - index), so all keys of a row are distinct int64s and
the k rounds of "take the row's max, then remove it" give the sort's order.
One program holds ROWS rows of up to MAX_EXPERTS keys in registers. It
replaces the sort (a segmented sort of whole rows: 4.6 us of a 43 us
Qwen3-30B-A3B forward at one token, docs/benchmarks.md) and the copy of the
sliced indices.

`topk_route` also takes the routing's scores and writes the weights of the
chosen experts in the same launch: each round's maximum carries the chosen
score, added to a float32 running sum in slot order from +0.0; after the
rounds each weight is its score divided (IEEE, round to nearest) by that
sum when renormalizing, then times the routed scaling factor rounded to
float32 -- `weights_expression`, bit for bit, which replaces the gather,
sum, division and product launches. Given no scores, it computes the
softmax of the keys (the logits) itself: exp(x - row max) with libdevice's
exp (the interpreter: numpy's), divided (IEEE) by the row's float32 sum of
them in the reduction's order -- torch.softmax's formula, one launch
fewer; its bits may differ from torch's (the sum's order), within the
routing weights' bound (harness.moe.tolerance.routing_weight_tolerance).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton

from harness.kernels.launch import run_kernel, triton_cdiv
from harness.kernels.loader import kernels

MAX_EXPERTS = 1024
IDX_BITS = 10  # 2^IDX_BITS >= MAX_EXPERTS
# One warp a program, holding one row (two when E_PAD is 16): on an H200 one row
# a warp ran the k rounds 1.1-1.8x faster than 16 rows on 4 warps at 16-4096
# tokens (docs/benchmarks.md); the rounds are chains of warp reductions.
WARP = 32
NUM_WARPS = 1
INTERPRETER_ELEMENTS = 2048  # the interpreter pays per program: it takes 2048 / E_PAD rows (<= 16) a program


def _kernel(interpret: bool):
    """The top-k kernel (topk_src.py): compiled, or the interpreter's copy."""
    return kernels(interpret, "topk_src")._topk_kernel


def applies(num_experts: int, k: int) -> bool:
    return 1 <= k <= num_experts <= MAX_EXPERTS


def meta(num_experts: int, interpret: bool = False) -> dict:
    e_pad = max(16, triton.next_power_of_2(num_experts))
    if interpret:
        return dict(E_PAD=e_pad, ROWS=max(1, min(16, INTERPRETER_ELEMENTS // e_pad)), IDX_BITS=IDX_BITS)
    return dict(E_PAD=e_pad, ROWS=max(1, WARP // e_pad), IDX_BITS=IDX_BITS, num_warps=NUM_WARPS)


def _check(keys: torch.Tensor, k: int, what: str) -> None:
    if keys.dim() != 2 or keys.dtype != torch.float32:
        raise ValueError(f"{what} takes float32 keys [T, E], got {keys.dtype} {tuple(keys.shape)}")
    if not applies(keys.shape[1], k):
        raise ValueError(f"{what}: k={k} of E={keys.shape[1]} keys is outside the kernel "
                         f"(1 <= k <= E <= {MAX_EXPERTS})")


def weights_expression(scores: torch.Tensor, ids: torch.Tensor, renormalize: bool, scale: float) -> torch.Tensor:
    """The chosen experts' weights as torch ops, the kernel's order: gather,
    divide by the slot-order float32 sum from +0.0 (renormalize), times
    fl32(scale) unless it is 1 (x * 1.0 is x)."""
    w = torch.gather(scores, 1, ids)
    if renormalize:
        total = torch.zeros(w.shape[0], 1, dtype=torch.float32, device=w.device)
        for j in range(w.shape[1]):
            total = total + w[:, j:j + 1]
        w = w / total
    if float(scale) != 1.0:
        w = w * float(scale)
    return w


def topk_route(keys: torch.Tensor, scores: Optional[torch.Tensor], k: int, renormalize: bool, scale: float = 1.0):
    """keys [T, E], scores [T, E] float32 -> (ids [T, k] int64 as topk_ids,
    weights [T, k] float32 as weights_expression(scores, ids, ...)), one
    launch; scores None: the keys' softmax, computed in the launch."""
    _check(keys, k, "topk_route")
    if scores is not None and (scores.shape != keys.shape or scores.dtype != torch.float32
                               or scores.device != keys.device):
        raise ValueError(f"topk_route: scores must be float32 {tuple(keys.shape)} on {keys.device}, got "
                         f"{scores.dtype} {tuple(scores.shape)} on {scores.device}")
    return _topk_route_op(keys, scores, int(k), bool(renormalize), float(scale))


def _launch(keys, scores, ids, w, k, renormalize, scale, softmax=False):
    T, E = keys.shape
    if T == 0:
        return
    interpret = keys.device.type != "cuda"
    kw = meta(E, interpret)
    weights = scores is not None or softmax
    kw.update(WEIGHTS=weights, RENORM=weights and renormalize, SCALED=weights and scale != 1.0, SOFTMAX=softmax)
    s = scores if scores is not None else keys
    # scale rounded to float32 here: the kernel's product is then fl32(w * fl32(scale)) either way
    args = (keys, s, ids, w if weights else keys, T, E, keys.stride(0), s.stride(0), k,
            float(torch.tensor(scale, dtype=torch.float32)))
    run_kernel(_kernel(interpret), (triton_cdiv(T, kw["ROWS"]),), args, kw, interpret)


@torch.library.custom_op("moe_harness::topk_route", mutates_args=())
def _topk_route_op(keys: torch.Tensor, scores: Optional[torch.Tensor], k: int, renormalize: bool,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    T = keys.shape[0]
    keys = keys if keys.stride(1) == 1 else keys.contiguous()
    if scores is not None and scores.stride(1) != 1:
        scores = scores.contiguous()
    ids = torch.empty(T, k, dtype=torch.int64, device=keys.device)
    w = torch.empty(T, k, dtype=torch.float32, device=keys.device)
    _launch(keys, scores, ids, w, k, renormalize, scale, softmax=scores is None)
    return ids, w


@_topk_route_op.register_fake
def _topk_route_fake(keys, scores, k, renormalize, scale):
    return (keys.new_empty((keys.shape[0], k), dtype=torch.int64),
            keys.new_empty((keys.shape[0], k), dtype=torch.float32))


def topk_ids(keys: torch.Tensor, k: int) -> torch.Tensor:
    """keys [T, E] float32 -> [T, k] int64: torch.sort(keys, dim=-1,
    descending=True, stable=True).indices[:, :k], contiguous. A custom op,
    opaque to torch.compile (as the GEMM)."""
    _check(keys, k, "topk_ids")
    return _topk_ids_op(keys, int(k))


@torch.library.custom_op("moe_harness::topk_ids", mutates_args=())
def _topk_ids_op(keys: torch.Tensor, k: int) -> torch.Tensor:
    keys = keys if keys.stride(1) == 1 else keys.contiguous()
    ids = torch.empty(keys.shape[0], k, dtype=torch.int64, device=keys.device)
    _launch(keys, None, ids, None, k, False, 1.0)
    return ids


@_topk_ids_op.register_fake
def _topk_ids_fake(keys, k):
    return keys.new_empty((keys.shape[0], k), dtype=torch.int64)
