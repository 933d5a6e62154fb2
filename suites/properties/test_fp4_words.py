"""The fused kernel's e2m1 word layout (harness.kernels.fp4_words): a
permutation of bits, one code's four bits at the slots' positions, and each
pair of a word the bf16x2 pattern of its codes' values x 2^-126 by the
rotations and masks the kernel's `_fp4_pairs` applies. The kernel's
decode of it is held to the reference by test_kernels_fused_gemm.py."""
from __future__ import annotations

import pytest
import torch

import harness.formats as hf
from harness.kernels import fp4_words

PAIR_MASK = fp4_words.PAIR_MASK


def _rotl(w: torch.Tensor, r: int) -> torch.Tensor:
    return ((w << r) | (w >> (32 - r))) & 0xFFFFFFFF if r else w


def _pair(p: int, w: torch.Tensor) -> torch.Tensor:
    """Pair p of words w (int64 in [0, 2^32)) as `_fp4_pairs` (fused_gemm_src.py)
    computes it: fp4_words.PAIR_ROTATIONS' rotations and masks, OR-ed."""
    out = torch.zeros_like(w)
    for r, mask in fp4_words.PAIR_ROTATIONS[p]:
        out |= _rotl(w, r) & mask
    return out


def test_pair_rotations_cover_each_pattern_bit_once():
    """Every pair's masks are disjoint and together the bf16x2 pattern's bits."""
    for p, parts in enumerate(fp4_words.PAIR_ROTATIONS):
        masks = [m for _, m in parts]
        assert sum(masks) == PAIR_MASK and len(set(masks)) == len(masks), p
        assert all(a & b == 0 for i, a in enumerate(masks) for b in masks[i + 1:]), p


def _e2m1(codes: torch.Tensor) -> torch.Tensor:
    return hf.dequantize(hf.QuantizedTensor(codes.reshape(1, -1), torch.full((1, codes.numel() // 32), 127,
                                                                             dtype=torch.uint8), None, "mxfp4"))


def test_every_code_in_every_slot_round_trips():
    """Slot s of word j takes code c while the other slots hold random codes:
    unpack(pack(x)) == x, and only slot s's bits move with c."""
    g = torch.Generator().manual_seed(0)
    base = torch.randint(0, 16, (16, 8, 8), generator=g, dtype=torch.uint8)  # [code, slot, 8 codes]
    for slot in range(8):
        codes = base[:, slot].clone()
        codes[:, slot] = torch.arange(16, dtype=torch.uint8)
        words = fp4_words.pack(codes)
        assert torch.equal(fp4_words.unpack(words), codes)
        sign, mag = fp4_words.SLOTS[slot]
        own = sum(1 << b for b in (sign, *mag))
        w = words.to(torch.int64) & 0xFFFFFFFF
        for c in range(16):
            bits = [(int(w[c, 0]) >> b) & 1 for b in (sign, *mag)]
            assert bits == [(c >> 3) & 1, (c >> 2) & 1, (c >> 1) & 1, c & 1], (slot, c)
        others = codes.clone()
        others[:, slot] = 0
        assert torch.equal(w & ~own & 0xFFFFFFFF, fp4_words.pack(others).to(torch.int64) & 0xFFFFFFFF & ~own)


def test_each_pair_is_the_bf16_pattern_of_its_codes():
    """Pair p of a word holds codes 2p, 2p + 1 as bf16 patterns whose values
    x 2^126 are the codes' e2m1 values, for every pair of codes."""
    c = torch.arange(256)
    lo, hi = (c % 16).to(torch.uint8), (c // 16).to(torch.uint8)
    for p in range(4):
        codes = torch.zeros(256, 8, dtype=torch.uint8)
        codes[:, 2 * p], codes[:, 2 * p + 1] = lo, hi
        w = fp4_words.pack(codes).reshape(256).to(torch.int64) & 0xFFFFFFFF
        bits = _pair(p, w)
        halves = torch.stack([bits & 0xFFFF, bits >> 16], -1).to(torch.int32)
        val = (halves << 16).view(torch.float32) * 2.0 ** 126  # bf16 pattern in float32's top half
        want = _e2m1(torch.stack([lo, hi], -1).reshape(-1)).reshape(256, 2)
        assert torch.equal(val.view(torch.int32), want.view(torch.int32)), p


def test_pack_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match="uint8 codes"):
        fp4_words.pack(torch.zeros(2, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="divisible by 8"):
        fp4_words.pack(torch.zeros(2, 12, dtype=torch.uint8))
    with pytest.raises(ValueError, match="int32 words"):
        fp4_words.unpack(torch.zeros(2, 1, dtype=torch.float32))


def test_fused_weights_refuse_a_layout_the_kernel_would_misread():
    """FusedWeights can be built by hand: e2m1 data must be the words' bytes
    [E, N, K/2] uint8, wider codes [E, N, K] uint8, scales [E, N, K/B]."""
    from harness.kernels.fused_weights import FusedWeights

    E, N, K = 2, 4, 64
    words = torch.zeros(E, N, K // 8, dtype=torch.int32)
    scales = torch.zeros(E, N, K // 32, dtype=torch.uint8)
    FusedWeights(1, words.view(torch.uint8), scales, None, "mxfp4", E, N, K)
    with pytest.raises(ValueError, match=r"mxfp4\): data must be the bytes of fp4_words' int32 words .* \[2, 4, 32\], "
                                         r"got torch.int32 \[2, 4, 8\]"):
        FusedWeights(1, words, scales, None, "mxfp4", E, N, K)
    with pytest.raises(ValueError, match=r"mxfp8_e4m3\): data must be uint8 codes of shape \[2, 4, 64\]"):
        FusedWeights(1, words.view(torch.uint8), scales, None, "mxfp8_e4m3", E, N, K)
    with pytest.raises(ValueError, match=r"scales must be uint8 \[2, 4, 2\]"):
        FusedWeights(1, words.view(torch.uint8), scales.float(), None, "mxfp4", E, N, K)


def test_fused_weights_refuse_strides_and_global_scales_the_kernel_would_misread():
    """Strides of the weights: unit along K, and (e2m1) byte offset and expert
    / row strides in whole int32 words; experts may lie anywhere apart. Scale
    bytes take any strides. Global scale: one
    contiguous float32 per expert for two-level formats, none for MX (the
    kernel divides by it exactly when it is there)."""
    from harness.kernels.fused_weights import FusedWeights

    E, N, K = 2, 4, 64
    data = torch.zeros(E, N, K // 2, dtype=torch.uint8)
    mx_scales = torch.zeros(E, N, K // 32, dtype=torch.uint8)
    nv_scales = torch.zeros(E, N, K // 16, dtype=torch.uint8)
    gs = torch.ones(E)
    far = torch.zeros(E * 4096, dtype=torch.uint8).as_strided((E, N, K // 2), (4096, K // 2, 1))
    FusedWeights(1, far, mx_scales, None, "mxfp4", E, N, K)  # experts apart, as checks/offsets.py lays them
    FusedWeights(1, data, nv_scales, gs, "nvfp4", E, N, K)
    with pytest.raises(ValueError, match=r"mxfp4\): data must have unit stride along its last dimension"):
        FusedWeights(1, torch.zeros(E, K // 2, N, dtype=torch.uint8).transpose(1, 2), mx_scales, None, "mxfp4",
                     E, N, K)
    # scale bytes: any strides (the kernel takes all three), e.g. each block's rows contiguous (scale order "n")
    assert FusedWeights(1, data, mx_scales, None, "mxfp4", E, N, K).scale_order == "k"
    n_order = torch.zeros(E, K // 32, N, dtype=torch.uint8).transpose(1, 2)
    assert FusedWeights(1, data, n_order, None, "mxfp4", E, N, K).scale_order == "n"
    with pytest.raises(ValueError, match=r"storage offset and expert / row strides \[1, 128, 32\]"):
        FusedWeights(1, torch.zeros(E * N * K // 2 + 1, dtype=torch.uint8)[1:].view(E, N, K // 2), mx_scales, None,
                     "mxfp4", E, N, K)
    rows_apart = torch.zeros(E * N * 34, dtype=torch.uint8).as_strided((E, N, K // 2), (N * 34, 34, 1))
    with pytest.raises(ValueError, match=r"\[0, 136, 34\] \(bytes\) must be multiples of 4"):
        FusedWeights(1, rows_apart, mx_scales, None, "mxfp4", E, N, K)
    with pytest.raises(ValueError, match=r"mxfp4\): an MX format takes no global scale, got \[2\]"):
        FusedWeights(1, data, mx_scales, gs, "mxfp4", E, N, K)
    for bad, got in ((None, "None"), (gs[:1], r"torch.float32 \[1\]"), (gs.double(), "torch.float64"),
                     (gs[:1].expand(E), r"torch.float32 \[2\] strides \[0\]"), (gs.reshape(E, 1), r"torch.float32 \[2, 1\]")):
        with pytest.raises(ValueError, match=r"nvfp4\): gscale must be contiguous float32 \[2\] \(one per expert\), "
                                             rf"got {got}"):
            FusedWeights(1, data, nv_scales, bad, "nvfp4", E, N, K)


@pytest.mark.parametrize("order", list(fp4_words.ORDERS))
def test_word_orders_round_trip(order):
    g = torch.Generator().manual_seed(7)
    codes = torch.randint(0, 16, (3, 5, 96), generator=g).to(torch.uint8)
    words = fp4_words.pack(codes, order)
    assert words.shape == (3, 5, 12)
    assert torch.equal(fp4_words.unpack(words, order), codes)
    assert torch.equal(fp4_words.unpack(words.view(torch.uint8), order), codes)


def test_mma_words_hold_the_pairs_of_one_mma_fragment_thread():
    """In an NVIDIA MMA operand fragment with two K neighbours to a register,
    the thread with lane % 4 == t holds K pairs t, t + 4, t + 8, t + 12 of
    each 16 pairs: word t of each group of four holds exactly those, in
    that order, each pair's even code in its low half (read back in K order
    with the "k" unpacker, which reads each word as it is)."""
    K = 64
    pair_of_k = (torch.arange(K) // 2 % 16).to(torch.uint8)  # code = the K pair it belongs to (mod 16)
    parity = (torch.arange(K) % 2).to(torch.uint8)
    stored = fp4_words.unpack(fp4_words.pack(pair_of_k.reshape(1, K), "mma"), "k").reshape(K // 32, 4, 8)
    for t in range(4):
        assert stored[:, t].tolist() == [[p for p in (t, t + 4, t + 8, t + 12) for _ in (0, 1)]] * (K // 32), t
    halves = fp4_words.unpack(fp4_words.pack(parity.reshape(1, K), "mma"), "k").reshape(-1)
    assert halves.tolist() == [0, 1] * (K // 2)
    assert torch.equal(fp4_words.pack(pair_of_k.reshape(1, K), "k"), fp4_words.pack(pair_of_k.reshape(1, K)))


def test_word_orders_refuse_what_they_cannot_hold():
    from harness.kernels.fused_weights import FusedWeights

    with pytest.raises(ValueError, match="unknown word order 'mma2'"):
        fp4_words.pack(torch.zeros(2, 32, dtype=torch.uint8), "mma2")
    with pytest.raises(ValueError, match="word order 'mma' needs K divisible by 32, got K=48"):
        fp4_words.pack(torch.zeros(2, 48, dtype=torch.uint8), "mma")
    E, N, K = 2, 4, 48
    words = torch.zeros(E, N, K // 8, dtype=torch.int32).view(torch.uint8)
    FusedWeights(1, words, torch.zeros(E, N, K // 16, dtype=torch.uint8), torch.ones(E), "nvfp4", E, N, K, "k")
    with pytest.raises(ValueError, match=r"fused weights \(nvfp4\): word order 'mma' needs K divisible by 32"):
        FusedWeights(1, words, torch.zeros(E, N, K // 16, dtype=torch.uint8), torch.ones(E), "nvfp4", E, N, K, "mma")
    codes = torch.zeros(E, N, 64, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"mxfp8_e4m3\): word order 'mma' applies to e2m1 words only"):
        FusedWeights(1, codes, torch.zeros(E, N, 2, dtype=torch.uint8), None, "mxfp8_e4m3", E, N, 64, "mma")
    with pytest.raises(ValueError, match=r"float\): word order 'mma' applies to e2m1 words only"):
        FusedWeights(0, torch.zeros(E, N, 64), None, None, None, E, N, 64, "mma")
