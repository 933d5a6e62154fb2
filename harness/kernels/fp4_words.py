"""The fused GEMM's storage of e2m1 weights: eight codes to an int32 word, each
code's bits placed where a bf16 pair wants them.

Codes k = 8j .. 8j + 7 of a weight row share word j. Consecutive codes (2i,
2i + 1) form one bf16x2 pair, low half first, as the MMA takes two K
neighbours in one register. A pair's bf16 bit pattern -- sign at bit 15,
the three magnitude bits (e1 e0 m) at bits 8..6, the same 16 bits higher for
the odd code -- is the code's value times 2^-126 (bf16's exponent bias less
e2m1's), so one exact multiply by 2^126 finishes it (a subnormal code passes
through a bf16 subnormal). The layout below puts pairs 0, 1 and 2 at that
pattern rotated right by 0, 4 and 10 bits, so the kernel places each with
one rotate (a funnel shift on NVIDIA, an align-bit on AMD) and one mask;
pair 3 takes the 8 bits left over, at the pattern rotated right by 6 (six
of its bits) and by 14 (the two e1 bits): two rotates, two masks and an
OR. Rotations are what allow this: with shifts alone the bits moved past
either end are lost, and the best layout leaves pair 3 three shifts. No
layout gives all four pairs one rotate each (an exhaustive search: the bits
the first three leave never form one rotated pattern). PAIR_ROTATIONS is
what the kernel's `_fp4_pairs` computes, as a table the tests read.
The stored byte form (two codes a byte, low nibble first) needs a multiply,
two masks and a shift per byte instead, and a byte shuffle to pair them; an
H200 ran the K loop at decode sizes 1.07-1.12x faster on words
(docs/benchmarks.md). Same bytes as the packed codes: K/8 words a row.

SLOTS is the layout as a table: per code of a word, its sign bit and the
bits of its magnitude (e1, e0, m). `pack` derives from it; the kernel's
`_fp4_pair_bits` (fused_gemm_src.py) is held to it by the exhaustive tests
in suites/properties/test_kernels_fused_gemm.py (every code in every slot).

Which codes share a word is the word order (ORDERS, per group of 32 codes
along K). "k": K order, word j holds codes 8j .. 8j + 7. "mma": the order of
an NVIDIA MMA operand fragment (mma.sync and wgmma with bf16 operands, two K
neighbours to a register): the thread with lane % 4 == t holds K pairs t,
t + 4, t + 8 and t + 12 of each group of 16 pairs, so word t of a group
holds those four pairs and one load gives a thread its fragment's codes,
with no exchange between threads after the decode. On an H200 the MXFP4
decode GEMMs ran 1.02-1.11x faster at 16 tokens on it with the weights as
the wgmma's register operand, 0.92-1.10x at one (docs/benchmarks.md);
launch_config.word_order says which order a device's weights take. The
order moves codes between words, never their values.
"""
from __future__ import annotations

import torch

# (sign bit, (e1, e0, m) bit positions) of codes 0..7 of a word
SLOTS = (
    (15, (8, 7, 6)), (31, (24, 23, 22)),  # pair 0: the bf16x2 pattern itself
    (11, (4, 3, 2)), (27, (20, 19, 18)),  # pair 1: the pattern rotated right by 4
    (5, (30, 29, 28)), (21, (14, 13, 12)),  # pair 2: rotated right by 10
    (9, (26, 1, 0)), (25, (10, 17, 16)),  # pair 3: e1 rotated right by 14, the rest by 6
)
# the kernel's left-rotations and masks per pair (the inverse of the rotations above)
PAIR_MASK = 0x81C081C0
PAIR_ROTATIONS = (((0, PAIR_MASK),), ((4, PAIR_MASK),), ((10, PAIR_MASK),),
                  ((6, 0x80C080C0), (14, 0x01000100)))
CODES_PER_WORD = len(SLOTS)

# Word orders: ORDERS[o][p] is the K offset (within its group of GROUP codes)
# of the code stored at position p of the group's words (position 8j + i is
# code i of word j of the group).
GROUP = 32
ORDERS = {
    "k": tuple(range(GROUP)),
    # word t: pairs t, t + 4, t + 8, t + 12 of the group, each low code first
    "mma": tuple(8 * i + 2 * t + h for t in range(4) for i in range(4) for h in range(2)),
}
# the K multiple each order needs: a group of 32 codes ("mma"), a word ("k")
K_MULTIPLE = {"k": CODES_PER_WORD, "mma": GROUP}


def _check_layout() -> None:
    used = [b for sign, mag in SLOTS for b in (sign, *mag)]
    if sorted(used) != list(range(32)):
        raise AssertionError(f"fp4_words.SLOTS must use every bit of a word once, uses {sorted(used)}")
    for name, order in ORDERS.items():
        if sorted(order) != list(range(GROUP)):
            raise AssertionError(f"fp4_words.ORDERS[{name!r}] must place every code of a group once, got {order}")


_check_layout()


def check_order(order: str, k: int, what: str = "fp4_words") -> None:
    """A word order's name and the K it needs (a clear error otherwise)."""
    if order not in ORDERS:
        raise ValueError(f"{what}: unknown word order {order!r}; expected one of {', '.join(ORDERS)}")
    if k % K_MULTIPLE[order]:
        raise ValueError(f"{what}: word order {order!r} needs K divisible by {K_MULTIPLE[order]}, got K={k}")


def _reorder(codes: torch.Tensor, order: tuple) -> torch.Tensor:
    """codes [..., K] -> the same codes with each group of GROUP permuted:
    out[..., g * GROUP + p] = codes[..., g * GROUP + order[p]]."""
    if order == ORDERS["k"]:
        return codes
    idx = torch.tensor(order, device=codes.device)
    g = codes.reshape(*codes.shape[:-1], -1, GROUP)
    return g.index_select(-1, idx).reshape(codes.shape)


def pack(codes: torch.Tensor, order: str = "k") -> torch.Tensor:
    """uint8 e2m1 codes [..., K] (0..15; K % 8 == 0, K % 32 for "mma") ->
    int32 words [..., K/8] in the layout of SLOTS and the word order `order`,
    on the codes' device (the kernel reads their little-endian bytes:
    `.view(torch.uint8)`)."""
    if codes.dtype != torch.uint8:
        raise ValueError(f"fp4_words.pack expects uint8 codes, got {codes.dtype}")
    if codes.shape[-1] % CODES_PER_WORD:
        raise ValueError(f"fp4_words.pack needs a last dimension divisible by {CODES_PER_WORD}, got shape "
                         f"{tuple(codes.shape)}")
    check_order(order, codes.shape[-1], "fp4_words.pack")
    # int32 throughout, one slot at a time, each word's codes read where the
    # order puts them (no reordered copy): the working set stays near the
    # codes' own bytes (a layer's kernel weights are built a chunk at a time
    # on the device, FusedWeights.from_quantized_by_experts)
    span = K_MULTIPLE[order]  # codes the order permutes among (its first `span` entries)
    perm = ORDERS[order][:span]
    c = codes.reshape(*codes.shape[:-1], -1, span)
    word = torch.zeros((*c.shape[:-1], span // CODES_PER_WORD), dtype=torch.int32, device=codes.device)
    for w in range(span // CODES_PER_WORD):
        acc = word[..., w]  # a view: the ORs land in `word`
        for slot, (sign, mag) in enumerate(SLOTS):
            code = c[..., perm[CODES_PER_WORD * w + slot]].to(torch.int32)
            acc |= ((code >> 3) & 1) << sign  # bit 31 wraps to the sign, as the 32-bit pattern wants
            for i, bit in enumerate(mag):
                acc |= ((code >> (2 - i)) & 1) << bit
    return word.reshape(*codes.shape[:-1], -1)


def unpack(words: torch.Tensor, order: str = "k") -> torch.Tensor:
    """The inverse of `pack`: int32 words [..., K/8] (or their bytes [..., K/2])
    in word order `order` -> uint8 codes [..., K]."""
    if words.dtype == torch.uint8:
        words = words.view(torch.int32)
    if words.dtype != torch.int32:
        raise ValueError(f"fp4_words.unpack expects int32 words, got {words.dtype}")
    w = words.to(torch.int64) & 0xFFFFFFFF
    out = []
    for sign, mag in SLOTS:
        code = ((w >> sign) & 1) << 3
        for i, bit in enumerate(mag):
            code |= ((w >> bit) & 1) << (2 - i)
        out.append(code)
    codes = torch.stack(out, -1).reshape(*words.shape[:-1], -1).to(torch.uint8)
    check_order(order, codes.shape[-1], "fp4_words.unpack")
    inverse = tuple(sorted(range(GROUP), key=ORDERS[order].__getitem__))
    return _reorder(codes, inverse)
