"""Triton source of the one-launch pair layout (host code: moe_align.py)."""
import triton
import triton.language as tl


@triton.jit
def _sum(x, axis: tl.constexpr):
    """tl.reduce with triton's own sum combiner: the same code compiled and
    interpreted (tl.sum is one of triton's jit functions)."""
    return tl.reduce(x, axis, tl.standard._sum_combine)


@triton.jit
def _cumsum(x, axis: tl.constexpr):
    """Inclusive running sum, the same way (tl.cumsum is a jit function too)."""
    return tl.associative_scan(x, axis, tl.standard._sum_combine)


@triton.jit
def _align_kernel(ids_ptr, rows_ptr, block_expert_ptr, P, E, NB, NROWS, BLOCK_M,
                  P_PAD: tl.constexpr, E_PAD: tl.constexpr, FILL: tl.constexpr):
    offs = tl.arange(0, P_PAD)
    pm = offs < P
    e = tl.load(ids_ptr + offs, mask=pm, other=-1).to(tl.int32)  # -1: a padding lane, no expert
    # rank: how many earlier pairs have the same expert, compared four experts a word: each expert
    # (< 256) a byte, a word XOR the pair's expert in every byte is zero where they are equal. The padding
    # lanes come after every pair, so the earlier-lanes mask never counts them.
    W: tl.constexpr = P_PAD // 4
    e8 = tl.where(pm, e, 0)
    words = _sum(tl.reshape(e8, [W, 4]) << (tl.arange(0, 4) * 8)[None, :], 1)  # [W]
    x = words[None, :] ^ (e8 * 0x01010101)[:, None]  # [P_PAD, W]
    nonzero = ((x & 0x7F7F7F7F) + 0x7F7F7F7F) | x  # a byte's top bit: the byte is not zero (no carries between bytes)
    equal = (~nonzero >> 7) & 0x01010101  # one bit a byte: that lane's expert is the pair's
    n_earlier = tl.minimum(tl.maximum(offs[:, None] - tl.arange(0, W)[None, :] * 4, 0), 4)  # lanes of the word < pair
    earlier = tl.where(n_earlier == 4, -1, (1 << (n_earlier * 8)) - 1)
    rank = _sum(((equal & earlier) * 0x01010101 >> 24) & 0xFF, 1)  # the bytes' bits added into the top byte
    # pairs per expert, padded, and where each expert starts: a histogram, its running sum and one gather (the
    # padding lanes counted in expert 0's bin, then taken off it)
    ex = tl.arange(0, E_PAD)
    cnt = tl.histogram(tl.where(pm, e, 0), E_PAD) - tl.where(ex == 0, P_PAD - P, 0)  # [E_PAD]
    padded = (cnt + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = _cumsum(padded, 0) - padded  # the padded rows of every lower expert
    start_of_pair = tl.gather(start, tl.where(pm, e, 0), 0)  # [P_PAD]
    dest = start_of_pair + rank
    for r0 in range(0, NROWS, FILL):
        ro = r0 + tl.arange(0, FILL)
        tl.store(rows_ptr + ro, tl.full((FILL,), -1, tl.int64), mask=ro < NROWS)
    for b0 in range(0, NB, FILL):
        bo = b0 + tl.arange(0, FILL)
        tl.store(block_expert_ptr + bo, tl.full((FILL,), -1, tl.int32), mask=bo < NB)
    tl.debug_barrier()  # the -1 fills land before the pairs (other threads' lanes)
    # dest < NROWS holds (moe_align.num_blocks); the mask keeps a wrong layout a wrong answer, not a stray write
    inside = pm & (dest < NROWS)
    tl.store(rows_ptr + dest, offs.to(tl.int64), mask=inside)
    # Every used block holds a pair (an expert's last block starts with one), so each block gets its
    # expert from the pairs in it (pairs of one block store the same value); the rest stay -1.
    tl.store(block_expert_ptr + dest // BLOCK_M, e, mask=inside)

