"""Triton kernel source: the fused dequant + grouped GEMM of the MoE experts.

Host code, launch tables and the numerics contract: fused_gemm.py. Weight
codes are decoded by triton_src's `_decode`, the element decoder every
kernel shares, except e2m1 under BYTE_DECODE (the GPU tables' choice): the
word layout of fp4_words.py gives each pair of codes its bf16 bit pattern
in a rotate and a mask (`_fp4_pairs` below), the same FAST bits, held
bit-equal to the reference by the same exhaustive tests. Loaded twice by harness.kernels.loader (compiled and
interpreted), like every kernel source.
"""
import triton
import triton.language as tl

from .triton_src import F32_BIAS, F32_MANT, _decode, _e8m0_value  # relative: within the loaded kind (loader.py)
from .fused_act_src import _silu_mul, _swiglu_clamp


@triton.jit
def _act(gate, up, ACT: tl.constexpr, ACT_LIMIT: tl.constexpr, ACT_ALPHA: tl.constexpr):
    """Activation code ACT (launch_config.ACT_CODES): 1 silu(gate) * up, 2 gpt-oss's clamped SwiGLU: the
    one-pass kernels' bits (fused_act_src.py)."""
    if ACT == 1:
        out = _silu_mul(gate, up)
    else:
        tl.static_assert(ACT == 2, "ACT: 1 silu, 2 swiglu_clamp")
        out = _swiglu_clamp(gate, up, ACT_LIMIT, ACT_ALPHA)
    return out


@triton.jit
def _rotl(w, r: tl.constexpr):
    """uint32 w rotated left by r (0 < r < 32): one funnel shift on NVIDIA
    (SHF.L.W), one v_alignbit on AMD."""
    return (w << r) | (w >> (32 - r))


@triton.jit
def _fp4_pairs(word):
    """int32 words of e2m1 codes in the layout of harness.kernels.fp4_words
    -> its four pairs, uint32 each: the bf16x2 bit pattern of codes (2p, 2p +
    1) of the word, the codes' values times 2^-126 (low half the even code;
    sign at bit 15, magnitude bits at 8..6, the same 16 bits up for the odd
    one). Pairs 0-2: one rotate and one mask; pair 3 (its e1 bits apart from
    the rest): two of each (fp4_words.PAIR_ROTATIONS)."""
    w = word.to(tl.uint32, bitcast=True)
    p0 = w & 0x81C081C0
    p1 = _rotl(w, 4) & 0x81C081C0
    p2 = _rotl(w, 10) & 0x81C081C0
    p3 = (_rotl(w, 6) & 0x80C080C0) | (_rotl(w, 14) & 0x01000100)
    return p0, p1, p2, p3


@triton.jit
def _fp4_pair_bits(word):
    """Words [n, m] -> pair patterns [n, 4m] in K order (pair i holds codes
    2i, 2i + 1)."""
    p0, p1, p2, p3 = _fp4_pairs(word)
    q = tl.join(tl.join(p0, p2), tl.join(p1, p3))  # [n, m, 2, 2]: [.., a, b] is pair 2a + b
    return tl.reshape(q, (q.shape[0], q.shape[1] * 4))


@triton.jit
def _fp4_pair_bits_mma(word):
    """Words [n, m] in fp4_words' "mma" order (word t of each group of four
    holds pairs t, t + 4, t + 8 and t + 12 of the group's 16) -> pair
    patterns [n, 4m] in K order. The permute only renames registers where
    the result feeds an MMA operand fragment (SWAP_MN)."""
    p0, p1, p2, p3 = _fp4_pairs(tl.reshape(word, (word.shape[0], word.shape[1] // 4, 4)))
    q = tl.join(tl.join(p0, p2), tl.join(p1, p3))  # [n, group, t, a, b]: pair 4 (2a + b) + t of the group
    q = tl.permute(q, (0, 1, 3, 4, 2))
    return tl.reshape(q, (word.shape[0], word.shape[1] * 4))


@triton.jit
def _pair_codes(bits):
    """Pair patterns [n, m] -> int32 codes [n, m, 2] (sign bit 3, magnitude 2..0)."""
    lo = ((bits >> 12) & 8) | ((bits >> 6) & 7)
    hi = ((bits >> 28) & 8) | ((bits >> 22) & 7)
    return tl.join(lo, hi).to(tl.int32, bitcast=True)


@triton.jit
def _pair_values_f32(bits, BIAS: tl.constexpr):
    """Pair patterns [n, m] -> float32 values [n, m, 2]: a bf16 pattern in the
    top half of a float32 word is the same number, times 2^(127 - BIAS) (the
    FAST construction: subnormal codes pass through float32 subnormals)."""
    return tl.join(bits << 16, bits & 0xFFFF0000).to(tl.float32, bitcast=True) * (2.0 ** (F32_BIAS - BIAS))


@triton.jit
def _pair_patterns_bf16(bits):
    """Pair patterns [n, m] -> the same bits as bfloat16 [n, m, 2]: each
    value times 2^(BIAS - 127)."""
    return tl.join(bits.to(tl.uint16), (bits >> 16).to(tl.uint16)).to(tl.bfloat16, bitcast=True)


@triton.jit
def _pair_values_bf16(bits, BIAS: tl.constexpr):
    """Pair patterns [n, m] -> bfloat16 values [n, m, 2], times 2^(127 - BIAS)
    (bf16's exponent bias is float32's; subnormal codes pass through bf16
    subnormals)."""
    return _pair_patterns_bf16(bits) * (2.0 ** (127 - BIAS))


@triton.jit
def _bf16_top(v):
    """float32 values that are bf16 numbers -> those bf16 numbers, by their
    top 16 bits (a float32 bf16 number has zeros below; Inf keeps its bits and
    a quiet NaN its quiet bit). Exact only there: no rounding is done."""
    return (v.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _block_mult(sc, gs_w, TWO_LEVEL: tl.constexpr, RAW_S: tl.constexpr, S_MBITS: tl.constexpr,
                S_WIDTH: tl.constexpr, S_BIAS: tl.constexpr, S_SIGN_BIT: tl.constexpr, S_SPECIALS: tl.constexpr,
                S_NAN_CODE: tl.constexpr, S_INF_CODE: tl.constexpr, S_MIN_NORMAL: tl.constexpr,
                PLAIN_SCALES: tl.constexpr = False):
    """Block scale bytes (int32) -> float32 multipliers, the reference's
    (formats.block_scale_values): 2^(b - 127) for E8M0 (NaN for 0xFF); a
    two-level row's minifloat s by the shared element decoder, divided by
    the expert's global scale with IEEE division (fl32(s / gs)), or s alone
    (RAW_S: precision "bf16", where the kernel applies 1/gs after the dot).
    PLAIN_SCALES (E8M0 only; FusedWeights.plain_scales): the float32 whose
    exponent field is b, without the cases of bytes 0 and 255."""
    if TWO_LEVEL:
        s = _decode(sc, S_MBITS, S_WIDTH, S_BIAS, S_SIGN_BIT, S_SPECIALS, S_NAN_CODE, S_INF_CODE, S_MIN_NORMAL)
        if RAW_S:
            return s
        return tl.math.div_rn(s, gs_w)
    if PLAIN_SCALES:
        return (sc << F32_MANT).to(tl.float32, bitcast=True)
    return _e8m0_value(sc)


@triton.jit
def _moe_gemm_kernel(
    x_ptr, rows_ptr, block_expert_ptr, w_ptr, scale_ptr, wgs_ptr, gs_ptr, out_ptr,
    bias_ptr, row_scale_ptr,  # HAS_BIAS: bias [E, N] float32 (row stride N); ROW_SCALE: [pairs] float32
    N, K, stride_xm, stride_om,
    stride_we, stride_wn,
    # the scale bytes' expert, row and block strides: rows of K / QBLOCK bytes, or each block's N rows contiguous
    # (FusedWeights.scale_order "n"; Triton specializes a stride of 1, so each order compiles its own loads)
    stride_me, stride_mn, stride_mb,
    SPLIT_BLOCKS, stride_os,  # split-K: program_id(2) sums BLOCK_Ks [pid*SPLIT_BLOCKS, +SPLIT_BLOCKS) into out + pid*stride_os
    x_row_div,  # pair p reads row p // x_row_div of x (GEMM1: x holds tokens, p = token * top_k + j)
    KIND: tl.constexpr,  # 0 float weights, 1 element codes
    PACKED: tl.constexpr,  # e2m1 codes eight per int32 word (fp4_words.py), stored as its bytes
    MMA_ORDER: tl.constexpr,  # PACKED words in fp4_words' "mma" word order (else "k")
    # the weight format's element constants (harness.kernels.constants.element_constants)
    MBITS: tl.constexpr, WIDTH: tl.constexpr, BIAS: tl.constexpr, SIGN_BIT: tl.constexpr, SPECIALS: tl.constexpr,
    NAN_CODE: tl.constexpr, INF_CODE: tl.constexpr, MIN_NORMAL: tl.constexpr,
    QBLOCK: tl.constexpr,  # quantization block along K
    # block scales: E8M0 bytes, or (TWO_LEVEL) the minifloat of the S_ constants over a float32 global scale
    # per expert at wgs_ptr; RAW_S: multiply by s alone (precision "bf16": 1/gs comes after the dot, HAS_POST)
    TWO_LEVEL: tl.constexpr, RAW_S: tl.constexpr,
    S_MBITS: tl.constexpr, S_WIDTH: tl.constexpr, S_BIAS: tl.constexpr, S_SIGN_BIT: tl.constexpr,
    S_SPECIALS: tl.constexpr, S_NAN_CODE: tl.constexpr, S_INF_CODE: tl.constexpr, S_MIN_NORMAL: tl.constexpr,
    BF16: tl.constexpr, HAS_POST: tl.constexpr, DEQUANT_ONLY: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    FAST_DECODE: tl.constexpr = False,  # _decode's FAST construction
    MULT_BCAST: tl.constexpr = True,  # load one multiplier per block and broadcast (else gather per element)
    PACK_JOIN: tl.constexpr = True,  # load fp4 words once and split (else one word per element)
    EVEN_NK: tl.constexpr = False,  # N % BLOCK_N == 0 and K % BLOCK_K == 0: weight loads need no masks
    K_TAIL: tl.constexpr = False,  # N % BLOCK_N == 0, K % BLOCK_K != 0: masks on the last BLOCK_K only
    # N % BLOCK_N == 0 and the weights finite past K to a multiple of BLOCK_K (FusedWeights.k_over: the next row's
    # codes under plain scales, or slack): one loop, the weight loads without masks, x's masked on K, so the products
    # past K are zeros (a GEMM launch only)
    K_OVERREAD: tl.constexpr = False,
    BYTE_DECODE: tl.constexpr = False,  # e2m1 under FAST_DECODE and PACK_JOIN: values from the pair bits
    BF16_DECODE: tl.constexpr = False,  # e2m1 decoded and scaled in bf16 (precision "bf16" GEMMs only)
    # BF16_DECODE's two multiplies in float32, the bf16 operand their top halves (_bf16_top): exact, as each
    # product is a bf16 number; for targets without a packed bf16 multiply (launch_config.ROCM_BF16_CODE_CONFIGS)
    BF16_TRUNC: tl.constexpr = False,
    # the epilogue of one split (the host sets them only with SPLIT_K 1): + bias[e, n], then * row_scale[pair]
    HAS_BIAS: tl.constexpr = False, ROW_SCALE: tl.constexpr = False,
    # compute the transposed product out^T = W x^T: the weights are the dot's first operand (wgmma takes it from
    # registers, in the fragment MMA_ORDER words load into), the rows of x its N (launch_config: decode tiles)
    SWAP_MN: tl.constexpr = False,
    # E8M0 scale bytes all in [1, 128], or 0 only over blocks of zero codes (FusedWeights.plain_scales): each
    # multiplier is the float whose exponent field is the byte, with no case for bytes 0 and 255
    PLAIN_SCALES: tl.constexpr = False,
    # e2m1 in bf16 on CUDA (launch_config drops it elsewhere): the pair patterns' 2^(127 - BIAS) folded into
    # each block multiplier, one packed multiply a pair in inline PTX (Triton's own bf16 multiplies there get
    # half the pairs scalarized and their halves swapped back: 144 byte permutes a K step on sm_90). MX with
    # PLAIN_SCALES: into the exponent field; NVFP4 (RAW_S, HAS_POST): s * 2^(127 - BIAS - S_FOLD_EXP), a bf16
    # number for every E4M3 s, and the post factor gives 2^S_FOLD_EXP back (launch_config.fold_exp)
    FOLD_BIAS: tl.constexpr = False,
    S_FOLD_EXP: tl.constexpr = 0,
    # with S_FOLDED, on CUDA sm_90 and later (launch_config.e4m3_convert): each E4M3 s by the hardware's
    # e4m3x2 -> f16x2 conversion (exact, NaN kept) and cvt to bf16, then times 2^(127 - BIAS - S_FOLD_EXP) in bf16
    # (exact: a power of two, a normal product), where _decode builds it by bits (sm_90 SASS of the BLOCK_M 16
    # GEMM, div16 strides: 1296 -> 1152 instructions)
    S_CVT: tl.constexpr = False,
    # the activation in the epilogue (GEMM1, one split; launch_config.ACT_CODES: 0 none, 1 silu, 2 swiglu_clamp
    # with ACT_LIMIT / ACT_ALPHA), after the bias: N is then the output's columns and the weights hold 2N rows,
    # gate (row n) then up (row N + n). A tile takes BLOCK_N // 2 gate rows and the same up rows and stores their
    # act(gate, up) in the output's dtype, where the GEMM alone would store [P, 2N] float32 for a pass to read
    ACT: tl.constexpr = 0, ACT_LIMIT: tl.constexpr = 0.0, ACT_ALPHA: tl.constexpr = 0.0,
):
    # BLOCK_K is a multiple of QBLOCK; K % QBLOCK == 0 for quantized weights.
    BYTES_E2M1: tl.constexpr = BYTE_DECODE and FAST_DECODE and SPECIALS == 0 and WIDTH == 4
    # bf16 decode: in the bf16 GEMM, or a dequant-only launch the host gave a bf16 output (BF16_DECODE is
    # set only where the multipliers are exact in bf16: 2^k, or nvfp4's E4M3 s in precision "bf16")
    BYTES_BF16: tl.constexpr = BYTES_E2M1 and BF16_DECODE and MULT_BCAST and (BF16 or DEQUANT_ONLY)
    # E8M0 multipliers built as bf16 from the byte's bits (PLAIN_SCALES, bf16 multiplies), and folded (FOLD_BIAS)
    PLAIN_BF16: tl.constexpr = BYTES_BF16 and not BF16_TRUNC and PLAIN_SCALES and not TWO_LEVEL
    # NVFP4's E4M3 s folded (GEMM launches only: the products are the weights times 2^-S_FOLD_EXP)
    S_FOLDED: tl.constexpr = (BYTES_BF16 and not BF16_TRUNC and FOLD_BIAS and TWO_LEVEL and RAW_S and HAS_POST
                              and not DEQUANT_ONLY)
    FOLDED: tl.constexpr = (PLAIN_BF16 and FOLD_BIAS) or S_FOLDED
    tl.static_assert(not (K_OVERREAD and (DEQUANT_ONLY or EVEN_NK or K_TAIL)),
                     "K_OVERREAD: a GEMM launch whose K has a tail (not EVEN_NK, not K_TAIL)")
    W_FULL: tl.constexpr = EVEN_NK or K_OVERREAD  # weight loads without masks
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    # Split-K (decode sizes: too few programs otherwise): this program's
    # range of BLOCK_K blocks; one split (grid z = 1, SPLIT_BLOCKS >= all
    # blocks) is the plain GEMM. The loop runs over block indices so that k0
    # = kb * BLOCK_K stays a known multiple of BLOCK_K: the compiler then
    # vectorizes the code and multiplier loads (a loop starting at a runtime
    # K offset lost that and ran nvfp4 up to 1.35x slower on the H200).
    pid_k = tl.program_id(2)
    kb_beg = pid_k * SPLIT_BLOCKS
    kb_end = tl.minimum(kb_beg + SPLIT_BLOCKS, (K + BLOCK_K - 1) // BLOCK_K)
    if DEQUANT_ONLY:
        e = pid_m.to(tl.int64)
    else:
        e_raw = tl.load(block_expert_ptr + pid_m)
        if e_raw < 0:  # an unused padding block (its rows are all -1): nothing to load or store
            return
        e = e_raw.to(tl.int64)
        offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        rows = tl.load(rows_ptr + offs_m)
        rmask = rows >= 0
        rows_safe = tl.where(rmask, rows, 0)
        x_rows = rows_safe // x_row_div
    if ACT and SWAP_MN:  # gate and up rows of 8 outputs in turn: the accumulator's rows r and r + 8 share a thread
        HALF: tl.constexpr = BLOCK_N // 2
        lane = tl.arange(0, BLOCK_N)
        offs_o = pid_n.to(tl.int64) * HALF + (lane // 16) * 8 + lane % 8
        nmask = offs_o < N
        offs_n = offs_o + ((lane // 8) % 2) * N
    elif ACT:  # HALF gate rows, then the up rows N further on (HALF-long contiguous runs, as the loads need)
        HALF: tl.constexpr = BLOCK_N // 2
        lane = tl.arange(0, BLOCK_N)
        offs_o = pid_n.to(tl.int64) * HALF + lane % HALF
        nmask = offs_o < N
        offs_n = offs_o + (lane // HALF) * N
    else:
        offs_n = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = offs_n < N
    w_base = w_ptr + e * stride_we + offs_n[:, None] * stride_wn
    if PACKED:  # the same rows as int32 words: the byte strides are multiples of 4 (K % 8 == 0)
        w_words = (w_ptr + e * stride_we).to(tl.pointer_type(tl.int32)) + offs_n[:, None] * (stride_wn // 4)
    m_base = scale_ptr + e * stride_me + offs_n[:, None] * stride_mn
    gs_w = 1.0
    if KIND == 1 and TWO_LEVEL and not RAW_S:
        gs_w = tl.load(wgs_ptr + e)
    if SWAP_MN:
        acc = tl.full((BLOCK_N, BLOCK_M), 0.0, tl.float32)
    else:
        acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    # K_TAIL: the full BLOCK_Ks load without masks (part 0), the partial last one with K masks (part 1: one
    # iteration, in the split that holds it, not pipelined); else one part, masked unless EVEN_NK (K_OVERREAD: x's
    # loads only; the last BLOCK_K reads the finite weights past K). The mask test is spelt out at each use:
    # a name assigned in the loop would hold a tensor, not a constexpr
    kb_full = K // BLOCK_K
    if not K_TAIL:
        # Every program has a K step: a split is never empty (select_launch) and K > 0. Told so, the compiler drops
        # the path that skips the loop, whose zeroed accumulator ptxas counts inside the wgmma pipeline: it then
        # serializes every wgmma of the transposed product (ptxas C7515; the rows at BLOCK_M 64 and up)
        tl.assume(kb_end > kb_beg)
    for part in tl.static_range(2 if K_TAIL else 1):
        if part == 0:
            kb_lo = kb_beg
            kb_hi = tl.minimum(kb_end, kb_full) if K_TAIL else kb_end
        else:
            kb_lo = tl.maximum(kb_beg, kb_full)
            kb_hi = kb_end
        for kb in tl.range(kb_lo, kb_hi, num_stages=1 if part == 1 else None):
            k0 = kb * BLOCK_K
            offs_k = k0 + tl.arange(0, BLOCK_K).to(tl.int64)
            kmask = offs_k < K
            if W_FULL or (K_TAIL and part == 0):  # a constant-true mask folds away
                wmask = tl.full((BLOCK_N, BLOCK_K), 1, tl.int1)
            else:
                wmask = nmask[:, None] & kmask[None, :]
            if KIND == 0:
                wv = tl.load(w_base + offs_k[None, :], mask=wmask, other=0.0)
                if not BF16:
                    wv = wv.to(tl.float32)
            else:
                if PACKED:  # e2m1 codes eight to a little-endian int32 word (fp4_words.py), read as words
                    if PACK_JOIN:
                        offs_kw = k0 // 8 + tl.arange(0, BLOCK_K // 8).to(tl.int64)
                        if W_FULL or (K_TAIL and part == 0):
                            word = tl.load(w_words + offs_kw[None, :])
                        else:
                            word = tl.load(w_words + offs_kw[None, :],
                                           mask=nmask[:, None] & (offs_kw < K // 8)[None, :], other=0)
                        if MMA_ORDER:
                            bits = _fp4_pair_bits_mma(word)
                        else:
                            bits = _fp4_pair_bits(word)
                        if not BYTES_E2M1:
                            code = tl.reshape(_pair_codes(bits), (BLOCK_N, BLOCK_K))
                        elif FOLDED:  # the pair patterns alone (values x 2^(BIAS - 127)): one multiply below
                            val = tl.reshape(_pair_patterns_bf16(bits), (BLOCK_N, BLOCK_K))
                        elif BYTES_BF16 and not BF16_TRUNC:
                            val = tl.reshape(_pair_values_bf16(bits, BIAS), (BLOCK_N, BLOCK_K))
                        else:
                            val = tl.reshape(_pair_values_f32(bits, BIAS), (BLOCK_N, BLOCK_K))
                    else:  # each element from its own word: its pair, then its half
                        if MMA_ORDER:  # K pair 4i + t of group g: pair i of word 4g + t
                            word_k = offs_k // 32 * 4 + (offs_k % 8) // 2
                            pair = ((offs_k % 32) // 8).to(tl.int32)[None, :]
                        else:
                            word_k = offs_k // 8
                            pair = ((offs_k % 8) // 2).to(tl.int32)[None, :]
                        word = tl.load(w_words + word_k[None, :], mask=wmask, other=0)
                        p0, p1, p2, p3 = _fp4_pairs(word)
                        bits = tl.where(pair == 0, p0, tl.where(pair == 1, p1, tl.where(pair == 2, p2, p3)))
                        half = bits >> ((offs_k % 2) * 16).to(tl.uint32)[None, :]
                        code = (((half >> 12) & 8) | ((half >> 6) & 7)).to(tl.int32, bitcast=True)
                else:
                    code = tl.load(w_base + offs_k[None, :], mask=wmask, other=0).to(tl.int32)
                if not (PACKED and PACK_JOIN and BYTES_E2M1):
                    # the element decoder of the emulation kernels (Inf/NaN codes, -0.0)
                    val = _decode(code, MBITS, WIDTH, BIAS, SIGN_BIT, SPECIALS, NAN_CODE, INF_CODE, MIN_NORMAL,
                                  FAST_DECODE)
                if MULT_BCAST:  # one multiplier per QBLOCK elements, broadcast over its block
                    offs_b = k0 // QBLOCK + tl.arange(0, BLOCK_K // QBLOCK).to(tl.int64)
                    if W_FULL or (K_TAIL and part == 0):
                        sc = tl.load(m_base + offs_b[None, :] * stride_mb)
                    else:
                        sc = tl.load(m_base + offs_b[None, :] * stride_mb, mask=nmask[:, None] & (offs_b < K // QBLOCK)[None, :],
                                     other=0)
                    if S_FOLDED and S_CVT:  # E4M3 pairs -> f16x2 -> bf16 (both exact, NaN kept), x 2^119 packed
                        tl.static_assert(S_MBITS == 3 and S_BIAS == 7 and 127 - BIAS - S_FOLD_EXP == 119,
                                         "S_CVT: E4M3 block scales folded by 2^119 (0x7B00) only")
                        m = tl.inline_asm_elementwise(
                            "{ .reg .b32 a, c, z; .reg .b16 l, h; cvt.rn.f16x2.e4m3x2 a, $1; mov.b32 {l, h}, a; "
                            "cvt.bf16.f16 l, l; cvt.bf16.f16 h, h; mov.b32 a, {l, h}; mov.b32 c, 0x7B007B00; "
                            "mov.b32 z, 0x80008000; fma.rn.bf16x2 $0, a, c, z; }",
                            "=r,h", [sc], dtype=tl.bfloat16, is_pure=True, pack=2)
                    elif PLAIN_BF16:
                        sc = sc.to(tl.int32)
                        # 2^(b - 127) as the bf16 whose exponent field is b: three integer operations fewer
                        # per multiplier than bytes 0 and 255 take (1.02-1.15x the decode GEMM on an H200)
                        if FOLDED:  # times the patterns' 2^(127 - BIAS): exponent field b + 127 - BIAS (<= 254, b <= 128)
                            sc = sc + (127 - BIAS)
                        m = (sc << 7).to(tl.uint16).to(tl.bfloat16, bitcast=True)
                    else:
                        m = _block_mult(sc.to(tl.int32), gs_w, TWO_LEVEL, RAW_S, S_MBITS, S_WIDTH, S_BIAS, S_SIGN_BIT,
                                        S_SPECIALS, S_NAN_CODE, S_INF_CODE, S_MIN_NORMAL, PLAIN_SCALES)
                        if S_FOLDED:  # exact: a power of two on a 4-bit s, inside bf16's normal range
                            m = m * (2.0 ** (127 - BIAS - S_FOLD_EXP))
                        if BYTES_BF16 and not BF16_TRUNC:  # exact: e2m1 x (2^k or an E4M3 value) fits bf16's 8 bits
                            m = m.to(tl.bfloat16)
                    if FOLDED:  # bf16 pairs times {m, m}: a packed multiply (x * m + -0 is x * m, one rounding)
                        wv = tl.inline_asm_elementwise(
                            "{ .reg .b32 z; mov.b32 z, 0x80008000; fma.rn.bf16x2 $0, $1, $2, z; }", "=r,r,r",
                            [tl.reshape(val, (BLOCK_N, BLOCK_K // QBLOCK, QBLOCK)),
                             tl.broadcast_to(m[:, :, None], (BLOCK_N, BLOCK_K // QBLOCK, QBLOCK))],
                            dtype=tl.bfloat16, is_pure=True, pack=2)
                        wv = tl.reshape(wv, (BLOCK_N, BLOCK_K))
                    else:
                        wv = tl.reshape(tl.reshape(val, (BLOCK_N, BLOCK_K // QBLOCK, QBLOCK)) * m[:, :, None],
                                        (BLOCK_N, BLOCK_K))
                    if BYTES_BF16 and BF16_TRUNC:  # the same products, computed in float32
                        wv = _bf16_top(wv)
                else:
                    sc = tl.load(m_base + (offs_k // QBLOCK)[None, :] * stride_mb, mask=wmask, other=0).to(tl.int32)
                    wv = val * _block_mult(sc, gs_w, TWO_LEVEL, RAW_S, S_MBITS, S_WIDTH, S_BIAS, S_SIGN_BIT, S_SPECIALS,
                                           S_NAN_CODE, S_INF_CODE, S_MIN_NORMAL, PLAIN_SCALES)
            if DEQUANT_ONLY:
                # dequant-only launch: stride_xm / stride_om are the output's expert / row strides
                tl.store(out_ptr + e * stride_xm + offs_n[:, None] * stride_om + offs_k[None, :], wv, mask=wmask)
            else:
                if EVEN_NK or (K_TAIL and part == 0):
                    amask = rmask[:, None]
                else:
                    amask = rmask[:, None] & kmask[None, :]
                a = tl.load(x_ptr + x_rows[:, None] * stride_xm + offs_k[None, :], mask=amask, other=0.0)
                if SWAP_MN and BF16:
                    acc = tl.dot(wv.to(tl.bfloat16), tl.trans(a.to(tl.bfloat16)), acc)
                elif SWAP_MN:
                    acc = tl.dot(wv, tl.trans(a), acc, input_precision="ieee")
                elif BF16:
                    acc = tl.dot(a.to(tl.bfloat16), tl.trans(wv.to(tl.bfloat16)), acc)
                else:
                    acc = tl.dot(a, tl.trans(wv), acc, input_precision="ieee")
    if not DEQUANT_ONLY:
        if SWAP_MN:
            acc = tl.trans(acc)
        if HAS_POST:  # nvfp4 in bf16: 1/(gs_w[e] gs_a) as fl(fl(1 / gs_w[e]) * fl(1 / gs_a))
            if S_FOLDED:  # the folded products' 2^-S_FOLD_EXP, given back exactly before the one rounding
                acc = acc * (2.0 ** S_FOLD_EXP)
            acc = acc * (tl.math.div_rn(1.0, tl.load(wgs_ptr + e)) * tl.math.div_rn(1.0, tl.load(gs_ptr)))
        # The torch ops the epilogue replaces, in their order and rounding: h + bias[ids] (one float32
        # add; never after HAS_POST's multiply, where the compiler could contract the two into an FMA),
        # then h * weight of the pair (one float32 multiply)
        if HAS_BIAS:  # bias rows of the weight rows (2N of them with ACT)
            acc = acc + tl.load(bias_ptr + e * (2 * N if ACT else N) + offs_n, mask=nmask, other=0.0)[None, :]
        if ROW_SCALE:
            acc = acc * tl.load(row_scale_ptr + rows_safe)[:, None]
        if ACT:  # columns [gate HALF | up HALF] (SWAP_MN: [gate 8 | up 8] in turn) -> act(gate, up) [BLOCK_M, HALF]
            if SWAP_MN:
                gate, up = tl.split(tl.reshape(tl.permute(tl.reshape(acc, (BLOCK_M, BLOCK_N // 16, 2, 8)), (0, 1, 3, 2)),
                                               (BLOCK_M, HALF, 2)))
            else:
                gate, up = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, HALF)), (0, 2, 1)))
            h = _act(gate, up, ACT, ACT_LIMIT, ACT_ALPHA)
            offs_h = pid_n.to(tl.int64) * HALF + tl.arange(0, HALF)
            tl.store(out_ptr + rows_safe[:, None] * stride_om + offs_h[None, :], h.to(out_ptr.dtype.element_ty),
                     mask=rmask[:, None] & (offs_h < N)[None, :])
        else:
            tl.store(out_ptr + pid_k.to(tl.int64) * stride_os + rows_safe[:, None] * stride_om + offs_n[None, :],
                     acc, mask=rmask[:, None] & nmask[None, :])


@triton.jit
def _split_column(part_ptr, ids_ptr, bias_ptr, row_scale_ptr, offs, p, mask, W, splits, stride_s,
                  HAS_BIAS: tl.constexpr, ROW_SCALE: tl.constexpr):
    """Offsets `offs` of partials [splits, P, W] (pairs p): the sum in split
    order, + bias[ids[p], offs - p W], * row_scale[p]."""
    ptrs = part_ptr + offs
    acc = tl.load(ptrs, mask=mask, other=0.0)
    for _ in range(1, splits):
        ptrs += stride_s  # 64-bit pointers: no int32 product of split and stride
        acc = acc + tl.load(ptrs, mask=mask, other=0.0)
    if HAS_BIAS:
        e = tl.load(ids_ptr + p, mask=mask, other=0)
        acc = acc + tl.load(bias_ptr + e * W + (offs - p * W), mask=mask, other=0.0)
    if ROW_SCALE:
        acc = acc * tl.load(row_scale_ptr + p, mask=mask, other=0.0)
    return acc


@triton.jit
def _split_sum_kernel(part_ptr, out_ptr, bias_ptr, ids_ptr, row_scale_ptr, total, N, splits, stride_s,
                      HAS_BIAS: tl.constexpr, ROW_SCALE: tl.constexpr, BLOCK: tl.constexpr,
                      ACT: tl.constexpr = 0, ACT_LIMIT: tl.constexpr = 0.0, ACT_ALPHA: tl.constexpr = 0.0):
    """The epilogue of a K-split GEMM (or of one whose launch left it), one
    pass: partials [splits, P, N] -> out [P, N] = their sum in split order
    (((p0 + p1) + p2) + ...), then + bias[ids[p]] and * row_scale[p], one
    float32 operation each in that order (the bits of `h + bias.index_select(0,
    ids)` and `h * row_scale[:, None]` on the sum). With ACT (the GEMM
    kernel's codes) the partials are [splits, P, 2N], gate then up, and out
    [P, N] = act(gate, up) in out's dtype; total is P x N either way (an
    int32, so the offsets' quotients are taken in 32 bits)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    if ACT:
        p = (offs.to(tl.int32) // N).to(tl.int64)
        gate_at = offs + p * N  # [P, 2N]: row p's gate at p 2N + col, its up N further on
        gate = _split_column(part_ptr, ids_ptr, bias_ptr, row_scale_ptr, gate_at, p, mask, 2 * N, splits, stride_s,
                             HAS_BIAS, ROW_SCALE)
        up = _split_column(part_ptr, ids_ptr, bias_ptr, row_scale_ptr, gate_at + N, p, mask, 2 * N, splits,
                           stride_s, HAS_BIAS, ROW_SCALE)
        acc = _act(gate, up, ACT, ACT_LIMIT, ACT_ALPHA)
    else:
        acc = _split_column(part_ptr, ids_ptr, bias_ptr, row_scale_ptr, offs, offs // N, mask, N, splits, stride_s,
                            HAS_BIAS, ROW_SCALE)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
