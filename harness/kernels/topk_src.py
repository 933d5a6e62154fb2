"""Triton source of the routing's top-k selection (host code: topk.py)."""
import os

import triton
import triton.language as tl
from triton.language.extra import libdevice

if os.environ.get("TRITON_INTERPRET") == "1":  # the loader's interpreted copy: no libdevice there, numpy's exp
    @triton.jit
    def _exp(x):
        return tl.exp(x)
else:  # the CUDA math library's expf (what torch.softmax's kernels call), or ROCm's
    @triton.jit
    def _exp(x):
        return libdevice.exp(x)


@triton.jit
def _max(x, axis: tl.constexpr):
    """tl.reduce with triton's own max combiner: the same code compiled and
    interpreted (tl.max is one of triton's jit functions)."""
    return tl.reduce(x, axis, tl.standard._elementwise_max)


@triton.jit
def _sum(x, axis: tl.constexpr):
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def _topk_kernel(keys_ptr, scores_ptr, ids_ptr, w_ptr, T, E, stride_t, stride_s, K, scale,
                 E_PAD: tl.constexpr, ROWS: tl.constexpr, IDX_BITS: tl.constexpr, WEIGHTS: tl.constexpr,
                 RENORM: tl.constexpr, SCALED: tl.constexpr, SOFTMAX: tl.constexpr):
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    e = tl.arange(0, E_PAD)
    ok = (r < T)[:, None] & (e < E)[None, :]
    v = tl.load(keys_ptr + r[:, None] * stride_t + e[None, :], mask=ok, other=0.0)
    b = v.to(tl.int32, bitcast=True)
    b = tl.where(b == -2147483648, 0, b)  # -0.0 ranks as +0.0 (the sort compares with <)
    mono = tl.where(b >= 0, b, b ^ 0x7FFFFFFF)  # float order as int32 order
    mono = tl.where(v != v, 2147483647, mono)  # NaN above +Inf, as torch.sort ranks it
    # one int64 per expert, unique: the key's rank, then the lower index first (a stable descending sort)
    low: tl.constexpr = (1 << IDX_BITS) - 1
    key = (mono.to(tl.int64) << IDX_BITS) + (low - e)
    key = tl.where(ok, key, -9223372036854775807 - 1)
    if SOFTMAX:  # the keys are the logits: their softmax, exp(x - max) over the sum of the row's exps
        x = tl.where(ok, v, -float("inf"))
        ex = _exp(x - _max(x, 1)[:, None])
        sc = tl.div_rn(ex, _sum(ex, 1)[:, None])
    elif WEIGHTS:
        sc = tl.load(scores_ptr + r[:, None] * stride_s + e[None, :], mask=ok, other=0.0)
    else:
        sc = tl.full([ROWS, E_PAD], 0.0, tl.float32)
    sbits = sc.to(tl.int32, bitcast=True)
    # Each chosen expert keeps its slot in registers; one scattered store after
    # the rounds writes ids and weights, so no round waits on memory.
    slot = tl.full([ROWS, E_PAD], -1, tl.int32)
    total = tl.full([ROWS], 0.0, tl.float32)  # the renormalizing sum: slot order from +0.0
    for j in range(K):
        best = _max(key, 1)
        hit = key == best[:, None]
        if RENORM:
            # the one hit lane's score bits: every other lane holds INT32_MIN, the
            # bits of -0.0, so the max is the hit lane's bits whatever they are
            chosen = _max(tl.where(hit, sbits, -2147483647 - 1), 1)
            total = total + chosen.to(tl.float32, bitcast=True)
        slot = tl.where(hit, j, slot)
        key = tl.where(hit, -9223372036854775807 - 1, key)
    out = r[:, None] * K + slot
    sel = ok & (slot >= 0)
    tl.store(ids_ptr + out, (e[None, :] + 0 * slot).to(tl.int64), mask=sel)
    if WEIGHTS:
        w = sc
        if RENORM:
            w = tl.div_rn(w, total[:, None])
        if SCALED:
            w = w * scale
        tl.store(w_ptr + out, w, mask=sel)
