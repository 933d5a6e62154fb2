"""Triton kernel source: the element codec (the one element decoder, which
the fused GEMM in fused_gemm_src.py imports), block QDQ, quantize-to-storage
and dequantize.

One kernel per operation, specialised for every format by compile-time
constants (harness.kernels.constants, derived from the format table). All
numerics are integer bit manipulation on float32 patterns plus IEEE float32
add/sub/mul/div_rn, in the reference's operation order, so results are
bit-identical to harness.formats on any backend that implements IEEE float32
with denormals (no native fp8 type is used anywhere: gfx942 has only FNUZ).

This file is loaded twice by harness.kernels.loader: once compiled for the
GPU, once under TRITON_INTERPRET=1 for the CPU interpreter. Keep it free of
imports from the project other than harness.formats.

Tiles are [BPP, BLOCK]: BPP quantization blocks of BLOCK elements. Every
global offset is int64 (program id widened before it is multiplied).
"""
import triton
import triton.language as tl

from harness.formats import spec as _spec
from harness.formats.spec import E8M0_BIAS, E8M0_MAX_BYTE, E8M0_NAN

# float32 layout and the E8M0 codec (fixed by IEEE 754 and the OCP MX spec).
F32_MANT: tl.constexpr = tl.constexpr(23)
F32_EXP_MASK: tl.constexpr = tl.constexpr(0x7F800000)
F32_ABS_MASK: tl.constexpr = tl.constexpr(0x7FFFFFFF)
F32_FRAC_MASK: tl.constexpr = tl.constexpr(0x7FFFFF)
F32_SIGN: tl.constexpr = tl.constexpr(-(2**31))  # 0x80000000 as int32
F32_BIAS: tl.constexpr = tl.constexpr(127)
F32_QNAN: tl.constexpr = tl.constexpr(0x7FC00000)
F32_INF: tl.constexpr = tl.constexpr(0x7F800000)
F32_MIN_SUB_E8M0: tl.constexpr = tl.constexpr(0x400000)  # 2^-127, a float32 subnormal
SC_BIAS: tl.constexpr = tl.constexpr(E8M0_BIAS)
SC_MAX: tl.constexpr = tl.constexpr(E8M0_MAX_BYTE)
SC_NAN: tl.constexpr = tl.constexpr(E8M0_NAN)
# MX scale-mode codes, named in harness.formats.spec (the SCALE_MODE constexpr).
SCALE_FLOOR: tl.constexpr = tl.constexpr(_spec.SCALE_FLOOR)
SCALE_CEIL: tl.constexpr = tl.constexpr(_spec.SCALE_CEIL)
SCALE_EVEN: tl.constexpr = tl.constexpr(_spec.SCALE_EVEN)
SCALE_RCEIL: tl.constexpr = tl.constexpr(_spec.SCALE_RCEIL)


# ---------------------------------------------------------------- element codec


@triton.jit
def _round_to_grid(ab, MBITS: tl.constexpr, EMIN_FIELD: tl.constexpr, AWAY: tl.constexpr):
    """Round magnitudes to an element grid, exactly.

    ab: int32 float32 bit patterns of magnitudes in [0, max_normal] (already
    saturated). The quantum is 2^(e - MBITS), e = max(exponent, emin): adding
    M = 2^23 * quantum puts the rounding point at M's last mantissa bit, so the
    float32 add rounds half-to-even exactly once and (a + M) - M is exact.
    Returns (rounded magnitude float32, magnitude code int32); the code is
    ((e - emin) << MBITS) + n with n the rounded multiple of the quantum,
    exactly the reference's formula (a carry into the exponent included)."""
    eb = tl.maximum(ab & F32_EXP_MASK, EMIN_FIELD)
    mb = eb + ((F32_MANT - MBITS) << F32_MANT)
    m = mb.to(tl.float32, bitcast=True)
    a = ab.to(tl.float32, bitcast=True)
    s = a + m
    r = s - m
    n = s.to(tl.int32, bitcast=True) - mb
    if AWAY:
        # A tie that RNE rounded down (a - r == quantum / 2) goes up instead.
        half_q = (mb - ((F32_MANT + 1) << F32_MANT)).to(tl.float32, bitcast=True)
        quantum = (mb - (F32_MANT << F32_MANT)).to(tl.float32, bitcast=True)
        tie = (a - r) == half_q
        r = tl.where(tie, r + quantum, r)
        n = n + tie.to(tl.int32)
    mag = ((eb - EMIN_FIELD) >> (F32_MANT - MBITS)) + n
    return r, mag


@triton.jit
def _decode(code, MBITS: tl.constexpr, WIDTH: tl.constexpr, BIAS: tl.constexpr, SIGN_BIT: tl.constexpr,
            SPECIALS: tl.constexpr, NAN_CODE: tl.constexpr, INF_CODE: tl.constexpr, MIN_NORMAL: tl.constexpr,
            FAST: tl.constexpr = False):
    """int32 element codes -> float32 values, by bits (no fp8 type, no table).
    The one element decoder: every kernel that reads codes calls it.

    FAST (the fused GEMM's tuned choice): the code's exponent and mantissa
    bits placed in float32's fields give the element's value times
    2^(BIAS - 127), and one exact power-of-two multiply fixes it; subnormal
    codes pass through float32 subnormals, so it is exact only where the
    target keeps denormals. Otherwise the construction below never forms a
    float32 subnormal."""
    mag = code & (SIGN_BIT - 1)
    sh = mag << (F32_MANT - MBITS)
    if FAST:
        bits = (sh.to(tl.float32, bitcast=True) * (2.0 ** (F32_BIAS - BIAS))).to(tl.int32, bitcast=True)
    else:
        normal = sh + ((F32_BIAS - BIAS) << F32_MANT)
        # Subnormal element: 2^emin * (1 + f) - 2^emin, exact (Sterbenz), and
        # never a float32 subnormal, so it does not depend on denormal support.
        sub = (sh + ((F32_BIAS + 1 - BIAS) << F32_MANT)).to(tl.float32, bitcast=True) - MIN_NORMAL
        bits = tl.where(mag < (1 << MBITS), sub.to(tl.int32, bitcast=True), normal)
    if SPECIALS == 1:  # "fn": the all-ones magnitude is NaN
        bits = tl.where(mag == NAN_CODE, F32_QNAN, bits)
    if SPECIALS == 2:  # "ieee": top exponent field is Inf (mantissa 0) or NaN
        bits = tl.where(mag >= INF_CODE, tl.where(mag == INF_CODE, F32_INF, F32_QNAN), bits)
    bits = bits | ((code & SIGN_BIT) << (32 - WIDTH))
    return bits.to(tl.float32, bitcast=True)


# ---------------------------------------------------------------- block scales


@triton.jit
def _mx_scale_byte(amax_bits, SCALE_MODE: tl.constexpr, EMAX: tl.constexpr, EVEN_ADD: tl.constexpr,
                   RCEIL_EXP: tl.constexpr, RCEIL_MANT: tl.constexpr):
    """E8M0 byte per block from the float32 bits of its amax (int32 >= 0; NaN
    patterns are above Inf's, so an integer max is NaN-aware)."""
    e = amax_bits >> F32_MANT
    if SCALE_MODE == SCALE_FLOOR:
        shared = e - F32_BIAS - EMAX
    elif SCALE_MODE == SCALE_CEIL:
        shared = e - F32_BIAS - EMAX + ((amax_bits & F32_FRAC_MASK) != 0).to(tl.int32)
    elif SCALE_MODE == SCALE_EVEN:  # Quark: round amax to the element mantissa first
        shared = ((amax_bits + EVEN_ADD) >> F32_MANT) - F32_BIAS - EMAX
    elif SCALE_MODE == SCALE_RCEIL:  # smallest n with amax <= max_normal * 2^n
        shared = e - F32_BIAS - RCEIL_EXP + ((amax_bits & F32_FRAC_MASK) > RCEIL_MANT).to(tl.int32)
    else:
        tl.static_assert(False, "unknown SCALE_MODE code (harness.formats.spec.SCALE_MODE_CODES)")
    byte = tl.minimum(tl.maximum(shared + SC_BIAS, 0), SC_MAX)
    byte = tl.where(amax_bits == 0, 0, byte)
    byte = tl.where(amax_bits >= F32_INF, SC_NAN, byte)
    return byte


@triton.jit
def _e8m0_inverse(byte):
    """2^(127 - byte) as float32, exact (byte 254 gives the subnormal 2^-127)."""
    e = (2 * SC_BIAS) - byte
    return tl.where(e > 0, e << F32_MANT, F32_MIN_SUB_E8M0).to(tl.float32, bitcast=True)


@triton.jit
def _e8m0_value(byte):
    """2^(byte - 127) as float32; byte 255 is NaN."""
    bits = tl.where(byte > 0, byte << F32_MANT, F32_MIN_SUB_E8M0)
    bits = tl.where(byte == SC_NAN, F32_QNAN, bits)
    return bits.to(tl.float32, bitcast=True)


# ---------------------------------------------------------------- one tile


@triton.jit
def _amax_bits(x):
    """Per-row max of |x| as float32 bits; tl.reduce with triton's own max
    combiner is a builtin, so the same code runs compiled and interpreted
    (tl.max itself is one of triton's jit functions)."""
    return tl.reduce(x.to(tl.int32, bitcast=True) & F32_ABS_MASK, 1, tl.standard._elementwise_max)


@triton.jit
def _block_scale(amax_bits, gs, IS_MX: tl.constexpr, SCALE_MODE: tl.constexpr, EMAX: tl.constexpr,
                 EVEN_ADD: tl.constexpr, RCEIL_EXP: tl.constexpr, RCEIL_MANT: tl.constexpr,
                 S_MBITS: tl.constexpr, S_EMIN_FIELD: tl.constexpr, S_NAN_CODE: tl.constexpr,
                 S_CLAMP_BITS: tl.constexpr, INV_ELEM_MAX: tl.constexpr):
    """Per block: (scale code, encode multiplier, dequantize multiplier, dead).
    dead: a NaN-scaled MX block, or an nvfp4 block with a zero or NaN scale."""
    if IS_MX:
        scale_code = _mx_scale_byte(amax_bits, SCALE_MODE, EMAX, EVEN_ADD, RCEIL_EXP, RCEIL_MANT)
        enc = _e8m0_inverse(scale_code)  # exact power-of-two scaling
        mult = _e8m0_value(scale_code)  # NaN for a NaN block: every value becomes NaN
        dead = scale_code == SC_NAN
    else:
        nan_blk = amax_bits > F32_INF
        # Operation order of the reference: gs * (amax * fl(1/elem_max)), then clamp.
        sf = gs * (amax_bits.to(tl.float32, bitcast=True) * INV_ELEM_MAX)
        sfb = tl.minimum(sf.to(tl.int32, bitcast=True), S_CLAMP_BITS)
        s, s_mag = _round_to_grid(sfb, S_MBITS, S_EMIN_FIELD, False)
        # (NaN built from bits: a NaN-valued global would fail triton's
        # 'global changed since compiled' check, NaN != NaN)
        s = tl.where(nan_blk, F32_QNAN, s.to(tl.int32, bitcast=True)).to(tl.float32, bitcast=True)
        scale_code = tl.where(nan_blk, S_NAN_CODE, s_mag)
        enc = tl.math.div_rn(gs, s)  # fl32(gs / s) first, as the reference
        mult = tl.math.div_rn(s, gs)  # fl32(s / gs) first, then the product
        dead = (s == 0) | nan_blk
    return scale_code, enc, mult, dead


@triton.jit
def _encode(x, enc, dead, IS_MX: tl.constexpr, ROUND_AWAY: tl.constexpr, MBITS: tl.constexpr,
            WIDTH: tl.constexpr, SIGN_BIT: tl.constexpr, EMIN_FIELD: tl.constexpr, MAXN_BITS: tl.constexpr,
            NAN_CODE: tl.constexpr):
    """Elements of a float32 tile [BPP, N] under per-block multipliers:
    (signed element values float32, element codes int32)."""
    xb = x.to(tl.int32, bitcast=True)
    y = x * enc[:, None]
    ab = tl.minimum(y.to(tl.int32, bitcast=True) & F32_ABS_MASK, MAXN_BITS)  # saturate
    r, mag = _round_to_grid(ab, MBITS, EMIN_FIELD, ROUND_AWAY)
    d = dead[:, None]
    if IS_MX:
        mag = tl.where(d, NAN_CODE, mag)
    else:
        r = tl.where(d, 0.0, r)  # sign-only codes
        mag = tl.where(d, 0, mag)
    values = (r.to(tl.int32, bitcast=True) | (xb & F32_SIGN)).to(tl.float32, bitcast=True)
    return values, mag | ((xb >> (32 - WIDTH)) & SIGN_BIT)


@triton.jit
def _quantize_tile(x, gs, IS_MX: tl.constexpr, SCALE_MODE: tl.constexpr, ROUND_AWAY: tl.constexpr,
                   EMAX: tl.constexpr, EVEN_ADD: tl.constexpr, MBITS: tl.constexpr, WIDTH: tl.constexpr,
                   SIGN_BIT: tl.constexpr, EMIN_FIELD: tl.constexpr, MAXN_BITS: tl.constexpr,
                   NAN_CODE: tl.constexpr, RCEIL_EXP: tl.constexpr, RCEIL_MANT: tl.constexpr,
                   S_MBITS: tl.constexpr, S_EMIN_FIELD: tl.constexpr, S_NAN_CODE: tl.constexpr,
                   S_CLAMP_BITS: tl.constexpr, INV_ELEM_MAX: tl.constexpr):
    """Quantize a float32 tile [BPP, BLOCK] block by block.

    Returns (signed element values float32 [BPP, BLOCK], element codes int32,
    scale codes int32 [BPP], dequantization multiplier float32 [BPP]); the
    reference's dequantized value is values * multiplier."""
    scale_code, enc, mult, dead = _block_scale(
        _amax_bits(x), gs, IS_MX, SCALE_MODE, EMAX, EVEN_ADD, RCEIL_EXP, RCEIL_MANT, S_MBITS, S_EMIN_FIELD,
        S_NAN_CODE, S_CLAMP_BITS, INV_ELEM_MAX)
    values, codes = _encode(x, enc, dead, IS_MX, ROUND_AWAY, MBITS, WIDTH, SIGN_BIT, EMIN_FIELD, MAXN_BITS, NAN_CODE)
    return values, codes, scale_code, mult


@triton.jit
def _split_pairs(w, IN_KIND: tl.constexpr):
    """Words holding two adjacent inputs (element 2i in the low half) -> the
    even and odd elements as float32, exactly. IN_KIND: 0 bfloat16 and 1
    float16 (int32 words), 2 float32 (int64 words)."""
    if IN_KIND == 0:
        lo = (w << 16).to(tl.float32, bitcast=True)
        hi = (w & -65536).to(tl.float32, bitcast=True)
    elif IN_KIND == 1:
        lo = (w & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (w >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    else:
        lo = w.to(tl.int32).to(tl.float32, bitcast=True)
        hi = (w >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    return lo, hi


@triton.jit
def _to_output(v, out_ptr, BF16_BY_BITS: tl.constexpr):
    """float32 -> the output dtype, round-to-nearest-even. The interpreter's
    own float32 -> bfloat16 cast truncates, so there (BF16_BY_BITS) the cast is
    done on the bits (when the output is bfloat16: the flag is per kernel,
    whose input and output dtypes may differ); compiled kernels use the
    native RNE conversion."""
    if BF16_BY_BITS and out_ptr.dtype.element_ty == tl.bfloat16:
        b = v.to(tl.int32, bitcast=True)
        r = (b + (0x7FFF + ((b >> 16) & 1))) >> 16
        r = tl.where(v != v, (b >> 16) | 0x40, r)  # NaN stays a (quiet) NaN
        return r.to(tl.int16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(out_ptr.dtype.element_ty)


@triton.jit
def _to_f32(x, BF16_BY_BITS: tl.constexpr):
    """Input -> float32 (exact). The interpreter's bfloat16 -> float32 cast
    mangles subnormals, so there bfloat16 is widened on the bits."""
    if BF16_BY_BITS and x.dtype == tl.bfloat16:
        return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@triton.jit
def _block_ids(pid, BPP: tl.constexpr):
    return pid.to(tl.int64) * BPP, tl.arange(0, BPP)


@triton.jit
def _load_gs(gs_ptr, blk, mask, blocks_per_gs, IS_MX: tl.constexpr, GS_PER_ROW: tl.constexpr):
    """Global scale per block: a scalar, or gs[block // blocks_per_gs]."""
    if IS_MX:
        gs = 1.0
    elif GS_PER_ROW:
        gs = tl.load(gs_ptr + blk // blocks_per_gs, mask=mask, other=1.0)
    else:
        gs = tl.load(gs_ptr)
    return gs


# ---------------------------------------------------------------- kernels


@triton.jit
def qdq_kernel(x_ptr, y_ptr, gs_ptr, n_blocks, blocks_per_gs,
               BPP: tl.constexpr, EVEN: tl.constexpr, GS_PER_ROW: tl.constexpr, BF16_BY_BITS: tl.constexpr,
               BLOCK: tl.constexpr, IS_MX: tl.constexpr, SCALE_MODE: tl.constexpr, ROUND_AWAY: tl.constexpr,
               EMAX: tl.constexpr, EVEN_ADD: tl.constexpr, MBITS: tl.constexpr, WIDTH: tl.constexpr,
               SIGN_BIT: tl.constexpr, EMIN_FIELD: tl.constexpr, MAXN_BITS: tl.constexpr,
               NAN_CODE: tl.constexpr, RCEIL_EXP: tl.constexpr, RCEIL_MANT: tl.constexpr,
               S_MBITS: tl.constexpr, S_EMIN_FIELD: tl.constexpr, S_NAN_CODE: tl.constexpr,
               S_CLAMP_BITS: tl.constexpr, INV_ELEM_MAX: tl.constexpr, SCALE_OUT: tl.constexpr):
    """y = dequantize(quantize(x)) for x, y flat [n_blocks * BLOCK]. SCALE_OUT
    (two-level formats, one scalar global scale): y = fl(qdq(x) * gs) in y's
    dtype instead, the QDQ with its global scale put back (codes times block
    scales: what the bf16 GEMM takes, applying 1 / gs after its dot)."""
    blk0, rows = _block_ids(tl.program_id(0), BPP)
    offs = rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    base = blk0 * BLOCK
    rmask = (blk0 + rows) < n_blocks
    if EVEN:
        x = tl.load(x_ptr + base + offs)
    else:
        x = tl.load(x_ptr + base + offs, mask=rmask[:, None], other=0.0)
    gs = _load_gs(gs_ptr, blk0 + rows, rmask, blocks_per_gs, IS_MX, GS_PER_ROW)
    values, _codes, _scodes, mult = _quantize_tile(
        _to_f32(x, BF16_BY_BITS), gs, IS_MX, SCALE_MODE, ROUND_AWAY, EMAX, EVEN_ADD, MBITS, WIDTH, SIGN_BIT,
        EMIN_FIELD, MAXN_BITS, NAN_CODE, RCEIL_EXP, RCEIL_MANT, S_MBITS, S_EMIN_FIELD, S_NAN_CODE,
        S_CLAMP_BITS, INV_ELEM_MAX)
    v = values * mult[:, None]
    if SCALE_OUT:  # a second float32 product: the bits of the two torch ops
        v = v * gs
    y = _to_output(v, y_ptr, BF16_BY_BITS)
    if EVEN:
        tl.store(y_ptr + base + offs, y)
    else:
        tl.store(y_ptr + base + offs, y, mask=rmask[:, None])


@triton.jit
def _load_rows(ptr, base, offs, rmask, EVEN: tl.constexpr):
    """A [BPP, W] tile at element offset `base` (int64); masked rows read 0."""
    if EVEN:
        return tl.load(ptr + base + offs)
    else:
        return tl.load(ptr + base + offs, mask=rmask[:, None], other=0)


@triton.jit
def _store_tile(c_ptr, s_ptr, blk0, offs, rows, rmask, codes, scodes, CW: tl.constexpr, EVEN: tl.constexpr):
    """Codes [BPP, CW] and one scale byte per block, for blocks blk0 + rows."""
    if EVEN:
        tl.store(c_ptr + blk0 * CW + offs, codes.to(tl.uint8))
        tl.store(s_ptr + blk0 + rows, scodes.to(tl.uint8))
    else:
        tl.store(c_ptr + blk0 * CW + offs, codes.to(tl.uint8), mask=rmask[:, None])
        tl.store(s_ptr + blk0 + rows, scodes.to(tl.uint8), mask=rmask)


# Quantize kernels run TPP consecutive tiles per program and load tile t + 1
# before working on tile t: the loads of the next tile are in flight while
# this one is computed, which is what lifts quantize (little to write, a lot
# of integer work per element) toward the memory bound (docs/benchmarks.md).


@triton.jit
def quantize_kernel(x_ptr, c_ptr, s_ptr, gs_ptr, n_blocks, blocks_per_gs,
                    BPP: tl.constexpr, EVEN: tl.constexpr, GS_PER_ROW: tl.constexpr, BF16_BY_BITS: tl.constexpr,
                    BLOCK: tl.constexpr, IS_MX: tl.constexpr, SCALE_MODE: tl.constexpr,
                    ROUND_AWAY: tl.constexpr, EMAX: tl.constexpr, EVEN_ADD: tl.constexpr, MBITS: tl.constexpr,
                    WIDTH: tl.constexpr, SIGN_BIT: tl.constexpr, EMIN_FIELD: tl.constexpr,
                    MAXN_BITS: tl.constexpr, NAN_CODE: tl.constexpr, RCEIL_EXP: tl.constexpr,
                    RCEIL_MANT: tl.constexpr, S_MBITS: tl.constexpr, S_EMIN_FIELD: tl.constexpr,
                    S_NAN_CODE: tl.constexpr, S_CLAMP_BITS: tl.constexpr, INV_ELEM_MAX: tl.constexpr,
                    TPP: tl.constexpr = 1):
    """One code per byte (the element's own bit layout) and one scale byte per block."""
    rows = tl.arange(0, BPP)
    offs = rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    first = tl.program_id(0).to(tl.int64) * (BPP * TPP)
    x = _load_rows(x_ptr, first * BLOCK, offs, (first + rows) < n_blocks, EVEN)
    for t in tl.static_range(TPP):
        blk0 = first + t * BPP
        rmask = (blk0 + rows) < n_blocks
        if t + 1 < TPP:  # prefetch the next tile
            x_next = _load_rows(x_ptr, (blk0 + BPP) * BLOCK, offs, (blk0 + BPP + rows) < n_blocks, EVEN)
        gs = _load_gs(gs_ptr, blk0 + rows, rmask, blocks_per_gs, IS_MX, GS_PER_ROW)
        _values, codes, scodes, _mult = _quantize_tile(
            _to_f32(x, BF16_BY_BITS), gs, IS_MX, SCALE_MODE, ROUND_AWAY, EMAX, EVEN_ADD, MBITS, WIDTH, SIGN_BIT,
            EMIN_FIELD, MAXN_BITS, NAN_CODE, RCEIL_EXP, RCEIL_MANT, S_MBITS, S_EMIN_FIELD, S_NAN_CODE,
            S_CLAMP_BITS, INV_ELEM_MAX)
        _store_tile(c_ptr, s_ptr, blk0, offs, rows, rmask, codes, scodes, BLOCK, EVEN)
        if t + 1 < TPP:
            x = x_next


@triton.jit
def quantize_packed_kernel(w_ptr, c_ptr, s_ptr, gs_ptr, n_blocks, blocks_per_gs,
                           BPP: tl.constexpr, EVEN: tl.constexpr, GS_PER_ROW: tl.constexpr, IN_KIND: tl.constexpr,
                           BLOCK: tl.constexpr, IS_MX: tl.constexpr, SCALE_MODE: tl.constexpr,
                           ROUND_AWAY: tl.constexpr, EMAX: tl.constexpr, EVEN_ADD: tl.constexpr,
                           MBITS: tl.constexpr, WIDTH: tl.constexpr, SIGN_BIT: tl.constexpr,
                           EMIN_FIELD: tl.constexpr, MAXN_BITS: tl.constexpr, NAN_CODE: tl.constexpr,
                           RCEIL_EXP: tl.constexpr, RCEIL_MANT: tl.constexpr, S_MBITS: tl.constexpr,
                           S_EMIN_FIELD: tl.constexpr, S_NAN_CODE: tl.constexpr, S_CLAMP_BITS: tl.constexpr,
                           INV_ELEM_MAX: tl.constexpr, TPP: tl.constexpr = 1):
    """fp4 codes packed two per byte, element 2i in the low nibble. The input
    is read as words of two elements (w_ptr: x viewed as int32/int64), so the
    even and odd elements arrive de-interleaved with no shuffle."""
    HALF: tl.constexpr = BLOCK // 2
    rows = tl.arange(0, BPP)
    offs = rows[:, None] * HALF + tl.arange(0, HALF)[None, :]
    first = tl.program_id(0).to(tl.int64) * (BPP * TPP)
    w = _load_rows(w_ptr, first * HALF, offs, (first + rows) < n_blocks, EVEN)
    for t in tl.static_range(TPP):
        blk0 = first + t * BPP
        rmask = (blk0 + rows) < n_blocks
        if t + 1 < TPP:  # prefetch the next tile
            w_next = _load_rows(w_ptr, (blk0 + BPP) * HALF, offs, (blk0 + BPP + rows) < n_blocks, EVEN)
        lo, hi = _split_pairs(w, IN_KIND)
        gs = _load_gs(gs_ptr, blk0 + rows, rmask, blocks_per_gs, IS_MX, GS_PER_ROW)
        # one reduction over both halves (integer max of |bits|: NaN-aware)
        amax = tl.reduce(tl.maximum(lo.to(tl.int32, bitcast=True) & F32_ABS_MASK,
                                    hi.to(tl.int32, bitcast=True) & F32_ABS_MASK), 1, tl.standard._elementwise_max)
        scodes, enc, _mult, dead = _block_scale(
            amax, gs, IS_MX, SCALE_MODE, EMAX, EVEN_ADD, RCEIL_EXP,
            RCEIL_MANT, S_MBITS, S_EMIN_FIELD, S_NAN_CODE, S_CLAMP_BITS, INV_ELEM_MAX)
        _v, c_lo = _encode(lo, enc, dead, IS_MX, ROUND_AWAY, MBITS, WIDTH, SIGN_BIT, EMIN_FIELD, MAXN_BITS, NAN_CODE)
        _v, c_hi = _encode(hi, enc, dead, IS_MX, ROUND_AWAY, MBITS, WIDTH, SIGN_BIT, EMIN_FIELD, MAXN_BITS, NAN_CODE)
        _store_tile(c_ptr, s_ptr, blk0, offs, rows, rmask, c_lo | (c_hi << 4), scodes, HALF, EVEN)
        if t + 1 < TPP:
            w = w_next


@triton.jit
def dequantize_kernel(c_ptr, s_ptr, gs_ptr, y_ptr, n_blocks, blocks_per_gs,
                      BPP: tl.constexpr, EVEN: tl.constexpr, GS_PER_ROW: tl.constexpr, PACKED: tl.constexpr,
                      BF16_BY_BITS: tl.constexpr,
                      BLOCK: tl.constexpr, IS_MX: tl.constexpr, MBITS: tl.constexpr, WIDTH: tl.constexpr,
                      BIAS: tl.constexpr, SIGN_BIT: tl.constexpr, SPECIALS: tl.constexpr,
                      NAN_CODE: tl.constexpr, INF_CODE: tl.constexpr, MIN_NORMAL: tl.constexpr,
                      S_MBITS: tl.constexpr, S_WIDTH: tl.constexpr, S_BIAS: tl.constexpr,
                      S_SIGN_BIT: tl.constexpr, S_SPECIALS: tl.constexpr, S_NAN_CODE: tl.constexpr,
                      S_INF_CODE: tl.constexpr, S_MIN_NORMAL: tl.constexpr):
    """Codes + scale bytes (+ global scale) -> values in y's dtype."""
    blk0, rows = _block_ids(tl.program_id(0), BPP)
    rmask = (blk0 + rows) < n_blocks
    if EVEN:
        sc = tl.load(s_ptr + blk0 + rows).to(tl.int32)
    else:
        sc = tl.load(s_ptr + blk0 + rows, mask=rmask, other=0).to(tl.int32)
    if IS_MX:
        mult = _e8m0_value(sc)
    else:
        gs = _load_gs(gs_ptr, blk0 + rows, rmask, blocks_per_gs, IS_MX, GS_PER_ROW)
        s = _decode(sc, S_MBITS, S_WIDTH, S_BIAS, S_SIGN_BIT, S_SPECIALS, S_NAN_CODE, S_INF_CODE, S_MIN_NORMAL)
        mult = tl.math.div_rn(s, gs)  # fl32(s / gs) first, then the product
    if PACKED:
        poffs = rows[:, None] * (BLOCK // 2) + tl.arange(0, BLOCK // 2)[None, :]
        if EVEN:
            b = tl.load(c_ptr + blk0 * (BLOCK // 2) + poffs).to(tl.int32)
        else:
            b = tl.load(c_ptr + blk0 * (BLOCK // 2) + poffs, mask=rmask[:, None], other=0).to(tl.int32)
        lo = _decode(b & 0xF, MBITS, WIDTH, BIAS, SIGN_BIT, SPECIALS, NAN_CODE, INF_CODE, MIN_NORMAL)
        hi = _decode(b >> 4, MBITS, WIDTH, BIAS, SIGN_BIT, SPECIALS, NAN_CODE, INF_CODE, MIN_NORMAL)
        v = tl.reshape(tl.join(lo, hi), [BPP, BLOCK])
    else:
        offs = rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        if EVEN:
            c = tl.load(c_ptr + blk0 * BLOCK + offs).to(tl.int32)
        else:
            c = tl.load(c_ptr + blk0 * BLOCK + offs, mask=rmask[:, None], other=0).to(tl.int32)
        v = _decode(c, MBITS, WIDTH, BIAS, SIGN_BIT, SPECIALS, NAN_CODE, INF_CODE, MIN_NORMAL)
    y = _to_output(v * mult[:, None], y_ptr, BF16_BY_BITS)
    yoffs = rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    if EVEN:
        tl.store(y_ptr + blk0 * BLOCK + yoffs, y)
    else:
        tl.store(y_ptr + blk0 * BLOCK + yoffs, y, mask=rmask[:, None])
