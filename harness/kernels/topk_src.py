"""Triton source of the routing's top-k selection (host code: topk.py)."""
import triton
import triton.language as tl


@triton.jit
def _max(x, axis: tl.constexpr):
    """tl.reduce with triton's own max combiner: the same code compiled and
    interpreted (tl.max is one of triton's jit functions)."""
    return tl.reduce(x, axis, tl.standard._elementwise_max)


@triton.jit
def _topk_kernel(keys_ptr, ids_ptr, T, E, stride_t, K, E_PAD: tl.constexpr, ROWS: tl.constexpr,
                 IDX_BITS: tl.constexpr):
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
    for j in range(K):
        best = _max(key, 1)
        tl.store(ids_ptr + r * K + j, low - (best & low), mask=r < T)
        key = tl.where(key == best[:, None], -9223372036854775807 - 1, key)
