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
def _stable_rank(e, pm, offs, P_PAD: tl.constexpr):
    """Per lane of `offs` (P_PAD of them; pm: the lanes that hold a pair, all
    before any padding lane), how many earlier lanes hold the same expert e
    (< 256), compared four experts a word: each expert a byte, a word XOR the
    lane's expert in every byte is zero where they are equal. The padding lanes
    come after every pair, so the earlier-lanes mask never counts them."""
    W: tl.constexpr = P_PAD // 4
    e8 = tl.where(pm, e, 0)
    words = _sum(tl.reshape(e8, [W, 4]) << (tl.arange(0, 4) * 8)[None, :], 1)  # [W]
    x = words[None, :] ^ (e8 * 0x01010101)[:, None]  # [P_PAD, W]
    nonzero = ((x & 0x7F7F7F7F) + 0x7F7F7F7F) | x  # a byte's top bit: the byte is not zero (no carries between bytes)
    equal = (~nonzero >> 7) & 0x01010101  # one bit a byte: that lane's expert is the pair's
    n_earlier = tl.minimum(tl.maximum(offs[:, None] - tl.arange(0, W)[None, :] * 4, 0), 4)  # lanes of the word < pair
    earlier = tl.where(n_earlier == 4, -1, (1 << (n_earlier * 8)) - 1)
    return _sum(((equal & earlier) * 0x01010101 >> 24) & 0xFF, 1)  # the bytes' bits added into the top byte


@triton.jit
def _expert_counts(e, pm, n_pad, E_PAD: tl.constexpr):
    """Pairs per expert [E_PAD] of the lanes pm holds (the n_pad padding lanes
    counted in expert 0's bin, then taken off it)."""
    ex = tl.arange(0, E_PAD)
    return tl.histogram(tl.where(pm, e, 0), E_PAD) - tl.where(ex == 0, n_pad, 0)


@triton.jit
def _fill(ptr, lo, hi, value, FILL: tl.constexpr):
    """ptr[lo:hi] = value, FILL at a time."""
    for r0 in range(lo, hi, FILL):
        ro = r0 + tl.arange(0, FILL)
        tl.store(ptr + ro, value, mask=ro < hi)


@triton.jit
def _place(rows_ptr, block_expert_ptr, e, pm, pair, dest, NROWS, BLOCK_M):
    """rows[dest] = the pair's id, block_expert[dest // BLOCK_M] = its expert.
    dest < NROWS holds (moe_align.num_blocks); the mask keeps a wrong layout a
    wrong answer, not a stray write. Every used block holds a pair (an
    expert's last block starts with one), so each block gets its expert from
    the pairs in it (pairs of one block store the same value); the rest stay -1."""
    inside = pm & (dest < NROWS)
    tl.store(rows_ptr + dest, pair.to(tl.int64), mask=inside)
    tl.store(block_expert_ptr + dest // BLOCK_M, e, mask=inside)


@triton.jit
def _align_kernel(ids_ptr, rows_ptr, block_expert_ptr, P, E, NB, NROWS, BLOCK_M,
                  P_PAD: tl.constexpr, E_PAD: tl.constexpr, FILL: tl.constexpr):
    offs = tl.arange(0, P_PAD)
    pm = offs < P
    e = tl.load(ids_ptr + offs, mask=pm, other=-1).to(tl.int32)  # -1: a padding lane, no expert
    rank = _stable_rank(e, pm, offs, P_PAD)
    # pairs per expert, padded, and where each expert starts: a histogram, its running sum and one gather
    cnt = _expert_counts(e, pm, P_PAD - P, E_PAD)
    padded = (cnt + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    start = _cumsum(padded, 0) - padded  # the padded rows of every lower expert
    start_of_pair = tl.gather(start, tl.where(pm, e, 0), 0)  # [P_PAD]
    _fill(rows_ptr, 0, NROWS, tl.full((FILL,), -1, tl.int64), FILL)
    _fill(block_expert_ptr, 0, NB, tl.full((FILL,), -1, tl.int32), FILL)
    tl.debug_barrier()  # the -1 fills land before the pairs (other threads' lanes)
    _place(rows_ptr, block_expert_ptr, e, pm, offs, start_of_pair + rank, NROWS, BLOCK_M)


# The layout in three launches for any number of pairs (chunks of CHUNK pairs, one program each): the chunks'
# expert counts, then (one program) where each chunk's pairs of each expert start, then each pair's place.
# A pair's place is its expert's start + the pairs of that expert in earlier chunks + its rank in its chunk:
# sort_pairs' stable order.

@triton.jit
def _chunk_count_kernel(ids_ptr, counts_ptr, rows_ptr, block_expert_ptr, P, NB, NROWS, FILL_ROWS, FILL_BLOCKS,
                        CHUNK: tl.constexpr, E_PAD: tl.constexpr, FILL: tl.constexpr):
    """counts[c, :] = pairs per expert of chunk c; each program also sets its
    share of rows and block_expert to -1 (FILL_ROWS / FILL_BLOCKS each)."""
    c = tl.program_id(0)
    offs = tl.arange(0, CHUNK)
    p = c * CHUNK + offs
    pm = p < P
    e = tl.load(ids_ptr + p, mask=pm, other=0).to(tl.int32)
    cnt = _expert_counts(e, pm, CHUNK - tl.minimum(P - c * CHUNK, CHUNK), E_PAD)
    tl.store(counts_ptr + c.to(tl.int64) * E_PAD + tl.arange(0, E_PAD), cnt)
    lo = c.to(tl.int64) * FILL_ROWS
    _fill(rows_ptr, lo, tl.minimum(lo + FILL_ROWS, NROWS), tl.full((FILL,), -1, tl.int64), FILL)
    lo = c.to(tl.int64) * FILL_BLOCKS
    _fill(block_expert_ptr, lo, tl.minimum(lo + FILL_BLOCKS, NB), tl.full((FILL,), -1, tl.int32), FILL)


@triton.jit
def _chunk_start_kernel(counts_ptr, starts_ptr, NC, BLOCK_M, E_PAD: tl.constexpr, CB: tl.constexpr):
    """starts[c, e] = the padded rows of every expert below e + the pairs of
    expert e in chunks before c (one program, CB chunks a step)."""
    ex = tl.arange(0, E_PAD)
    total = tl.full((E_PAD,), 0, tl.int32)
    for c0 in range(0, NC, CB):
        cs = c0 + tl.arange(0, CB)
        at = cs.to(tl.int64)[:, None] * E_PAD + ex[None, :]
        total += _sum(tl.load(counts_ptr + at, mask=(cs < NC)[:, None], other=0), 0)
    padded = (total + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    carry = _cumsum(padded, 0) - padded  # where each expert starts
    for c0 in range(0, NC, CB):
        cs = c0 + tl.arange(0, CB)
        at = cs.to(tl.int64)[:, None] * E_PAD + ex[None, :]
        cm = (cs < NC)[:, None]
        tile = tl.load(counts_ptr + at, mask=cm, other=0)
        tl.store(starts_ptr + at, carry[None, :] + _cumsum(tile, 0) - tile, mask=cm)
        carry += _sum(tile, 0)


@triton.jit
def _chunk_place_kernel(ids_ptr, starts_ptr, rows_ptr, block_expert_ptr, P, NROWS, BLOCK_M,
                        CHUNK: tl.constexpr, E_PAD: tl.constexpr):
    """Each pair of chunk c at starts[c, its expert] + its rank in the chunk."""
    c = tl.program_id(0)
    offs = tl.arange(0, CHUNK)
    p = c * CHUNK + offs
    pm = p < P
    e = tl.load(ids_ptr + p, mask=pm, other=-1).to(tl.int32)
    rank = _stable_rank(e, pm, offs, CHUNK)
    start = tl.load(starts_ptr + c.to(tl.int64) * E_PAD + tl.where(pm, e, 0))
    _place(rows_ptr, block_expert_ptr, e, pm, p, start + rank, NROWS, BLOCK_M)
