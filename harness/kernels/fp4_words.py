"""The fused GEMM's storage of e2m1 weights: eight codes to an int32 word, each
code's bits placed where a bf16 pair wants them.

Codes k = 8j .. 8j + 7 of a weight row share word j. Consecutive codes (2i,
2i + 1) form one bf16x2 pair, low half first, as the MMA takes two K
neighbours in one register. A pair's bf16 bit pattern -- sign at bit 15,
the three magnitude bits (e1 e0 m) at bits 8..6, the same 16 bits higher for
the odd code -- is the code's value times 2^-126 (bf16's exponent bias less
e2m1's), so one exact multiply by 2^126 finishes it (a subnormal code passes
through a bf16 subnormal). The layout below puts pairs 0, 1 and 2 at that
pattern shifted right by 0, 3 and 6 bits, so the kernel places each with one
shift and one mask; pair 3 takes the 8 bits left over and three shifts.
The stored byte form (two codes a byte, low nibble first) needs a multiply,
two masks and a shift per byte instead, and a byte shuffle to pair them; an
H200 ran the K loop at decode sizes 1.07-1.12x faster on words
(docs/benchmarks.md). Same bytes as the packed codes: K/8 words a row.

SLOTS is the layout as a table: per code of a word, its sign bit and the
bits of its magnitude (e1, e0, m). `pack` derives from it; the kernel's
`_fp4_pair_bits` (fused_gemm_src.py) is held to it by the exhaustive tests
in suites/properties/test_kernels_fused_gemm.py (every code in every slot).
"""
from __future__ import annotations

import torch

# (sign bit, (e1, e0, m) bit positions) of codes 0..7 of a word
SLOTS = (
    (15, (8, 7, 6)), (31, (24, 23, 22)),  # pair 0: the bf16x2 pattern itself
    (12, (5, 4, 3)), (28, (21, 20, 19)),  # pair 1: the pattern >> 3
    (9, (2, 1, 0)), (25, (18, 17, 16)),  # pair 2: the pattern >> 6
    (14, (13, 11, 10)), (30, (29, 27, 26)),  # pair 3: the bits left over
)
CODES_PER_WORD = len(SLOTS)


def _check_layout() -> None:
    used = [b for sign, mag in SLOTS for b in (sign, *mag)]
    if sorted(used) != list(range(32)):
        raise AssertionError(f"fp4_words.SLOTS must use every bit of a word once, uses {sorted(used)}")


_check_layout()


def pack(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e2m1 codes [..., K] (0..15, K % 8 == 0) -> int32 words [..., K/8]
    in the layout of SLOTS, on the codes' device (the kernel reads their
    little-endian bytes: `.view(torch.uint8)`)."""
    if codes.dtype != torch.uint8:
        raise ValueError(f"fp4_words.pack expects uint8 codes, got {codes.dtype}")
    if codes.shape[-1] % CODES_PER_WORD:
        raise ValueError(f"fp4_words.pack needs a last dimension divisible by {CODES_PER_WORD}, got shape "
                         f"{tuple(codes.shape)}")
    # int32 throughout, one slot at a time: the working set stays near the
    # codes' own bytes (a layer's kernel weights are built a chunk at a time
    # on the device, FusedWeights.from_quantized_by_experts)
    c = codes.reshape(*codes.shape[:-1], -1, CODES_PER_WORD)
    word = torch.zeros(c.shape[:-1], dtype=torch.int32, device=codes.device)
    for slot, (sign, mag) in enumerate(SLOTS):
        code = c[..., slot].to(torch.int32)
        word |= ((code >> 3) & 1) << sign  # bit 31 wraps to the sign, as the 32-bit pattern wants
        for i, bit in enumerate(mag):
            word |= ((code >> (2 - i)) & 1) << bit
    return word


def unpack(words: torch.Tensor) -> torch.Tensor:
    """The inverse of `pack`: int32 words [..., K/8] (or their bytes [..., K/2])
    -> uint8 codes [..., K]."""
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
    return torch.stack(out, -1).reshape(*words.shape[:-1], -1).to(torch.uint8)
