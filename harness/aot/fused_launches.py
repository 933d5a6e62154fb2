"""Every GPU launch of the fused MoE kernels (fused_gemm.py, fused_act.py) that
their host code can make, registered for the ahead-of-time compile check
(harness.aot.registry).

Built from the selector the launcher calls (launch_config.select_launch, on
the vendor of the backend) and fused_act's *_META: for every weight format
of the format table (and float weights for the "bf16" baseline), precision
"ieee" and "bf16", every BLOCK_M class (pair_layout.BLOCK_MS), mode "fused"
(with a short K loop where the tables have a row for it, and the BLOCK_K a
K with a tail steps down to) and both launches
of mode "predequant", MX weights with and without plain scale bytes
(FusedWeights.plain_scales), e2m1 words in the "mma" order read past a
ragged long K under plain scales (K_OVERREAD, ".kover"), both scale-byte
orders (launch_config.scale_order, which also picks the row of the BLOCK_M
64 and up),
masked and unmasked N/K tails, and every epilogue a
GEMM launch can get (EPILOGUES: none, the router weights of GEMM2, the bias
of gpt-oss's GEMM1, both; GEMM1's activation, silu or the clamped SwiGLU,
with and without the bias, writing float32 or, in the bf16 GEMMs, their bf16
hand-off; after a post factor the bias, and so the activation after it, go
to the split-sum pass).
"""
from __future__ import annotations

import torch

from harness.formats import FLOAT_DTYPES, FORMAT_NAMES, get_format

from harness.kernels import fused_act, fused_gemm
from harness.kernels.launch_config import (ACT_CODES, ACT_NAMES, LONG_K_MIN, SHORT_K_MAX, act_constexprs, masks_every_block_k,
                                           select_launch, word_order)
from harness.kernels.pair_layout import BLOCK_MS
from harness.aot.emulation_launches import ptr
from harness.aot.registry import Variant, bind, register
from harness.kernels import moe_align

_DT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_OPTIONS = ("num_warps", "num_stages", "maxnreg", "enable_fp_fusion")
_INTS = ("N", "K", "stride_xm", "stride_om", "stride_we", "stride_wn", "stride_me", "stride_mn", "stride_mb", "SPLIT_BLOCKS", "stride_os",
         "x_row_div")


def _variant(kernel, config, types, meta):
    options = {k: v for k, v in meta.items() if k in _OPTIONS}
    consts = {k: v for k, v in meta.items() if k not in _OPTIONS}
    sig, consts = bind(kernel, types, consts)
    return Variant(config, sig, consts, options)


def _gemm_types(x_dt, w_dt, codes: bool = False):
    """Pointer and integer types of a GEMM launch; `codes`: weights as element
    codes (bytes; scale bytes beside them)."""
    return dict(x_ptr=ptr(x_dt), rows_ptr="*i64", block_expert_ptr="*i32", w_ptr=ptr(w_dt),
                scale_ptr="*u8" if codes else "*fp32", wgs_ptr="*fp32", gs_ptr="*fp32",
                out_ptr="*fp32", bias_ptr="*fp32", row_scale_ptr="*fp32", **{n: "i32" for n in _INTS})


# (bias, row_scale, activation) as the experts ask for them, named by what the launch then does in its epilogue:
# GEMM2's router weights, gpt-oss's GEMM1 bias, GEMM1's activation with or without the bias
EPILOGUES = ((False, False, None), (False, True, None), (True, False, None), (True, True, None),
             (False, False, "silu"), (True, False, "silu"), (False, False, "swiglu_clamp"),
             (True, False, "swiglu_clamp"))


def _act_outs(act: int, bf16: bool) -> tuple:
    """The output pointer types of an epilogue: float32, and with an activation in the bf16 GEMMs also their
    bf16 hand-off (the next GEMM's operand)."""
    return ("*fp32", "*bf16") if act and bf16 else ("*fp32",)


def _epilogue_name(bias: bool, rs: bool, act: int, out: str) -> str:
    return ((".bias" if bias else "") + (".rs" if rs else "") + (f".{ACT_NAMES[act]}" if act else "")
            + (".bf16out" if out == "*bf16" else ""))


def _epilogue_launches(launch, **kw):
    """(name suffix, LaunchConfig, output pointer type) per distinct epilogue of the launch."""
    seen = set()
    for bias, rs, act in EPILOGUES:
        cfg = launch(bias=bias, row_scale=rs, act=ACT_CODES[act] if act else 0, **kw)
        for out in _act_outs(cfg.ACT, cfg.BF16):
            key = (cfg.HAS_BIAS, cfg.ROW_SCALE, cfg.ACT, out)
            if key not in seen:
                seen.add(key)
                yield _epilogue_name(cfg.HAS_BIAS, cfg.ROW_SCALE, cfg.ACT, out), cfg, out


def weight_formats():
    """Weight formats the GEMM decodes: every row of the format table."""
    return list(FORMAT_NAMES)


# The rows a GEMM launch takes by its K loop, named after the format, precision and BLOCK_M: the short-K row, the
# long-K row at BLOCK_M 64 and up, "medium" at BLOCK_M 32 (launch_config.row_names)
ROW_SUFFIX = {"small_short_k": ".shortk", "large_long_k": ".longk", "medium": ".medium"}

# The scale bytes' orders (launch_config.scale_order) as the launcher specialises them: Triton binds an integer
# argument of 1 as a constant, the block stride in order "k" and the row stride in order "n" (named ".n")
SCALE_ORDER_STRIDES = (("", {"stride_mb": 1}), (".n", {"stride_mn": 1}))


def _code_variants(k, launch, gemms, fmt, prec, bm, tail, ov, plain):
    """The launches on element codes of one format: mode "fused" (with a
    short K loop where the tables have a row for it, and with a K tail: masks on
    the last BLOCK_K only) and mode "predequant"'s dequant pass, each in both
    scale orders (SCALE_ORDER_STRIDES) but the short K loop's, which keeps
    "k". `plain`: FusedWeights.plain_scales (MX weights), named ".plain"
    after the format."""
    bf16 = prec == "bf16"
    x_dt = torch.bfloat16 if bf16 else torch.float32
    post = bf16 and get_format(fmt).has_global_scale  # 1/(gs_w * gs_a) after the dot
    codes = _gemm_types(x_dt, torch.uint8, codes=True)
    kw = dict(kind=1, fmt=fmt, bf16=bf16, has_post=post, block_m=bm, override=ov, plain_scales=plain)
    for order, strides in SCALE_ORDER_STRIDES:
        name = fmt + (".plain" if plain else "") + order
        kw = dict(kw, scale_order="n" if order else "k")  # the order picks the row at BLOCK_M 64 and up
        fused = None
        for epi, fused, out in gemms("gemm", k=0, **kw):
            yield _variant(k, f"fused.{name}.{prec}.bm{bm}.{tail}{epi}", dict(codes, out_ptr=out),
                           dict(fused.meta(), **strides))
        # a short or a long K loop takes a row of its own where the tables have one (ROW_SUFFIX), each row once;
        # the short-K row only in scale order "k" (scale_order: a short K keeps it)
        done = {fused.row}
        for kk in (SHORT_K_MAX, LONG_K_MIN):
            rows = set()
            for epi, cfg, out in gemms("gemm", k=kk, **kw):
                if cfg.row in done or (cfg.row == "small_short_k" and order):
                    continue
                rows.add(cfg.row)
                yield _variant(k, f"fused.{name}.{prec}.bm{bm}.{tail}{ROW_SUFFIX[cfg.row]}{epi}",
                               dict(codes, out_ptr=out), dict(cfg.meta(), **strides))
            done |= rows
        if fused.MMA_ORDER and plain and not ov.get("EVEN_NK"):
            # e2m1 words in the "mma" order read past a ragged long K (read_k; plain scales only): the row of that
            # K, K_OVERREAD
            for epi, over, out in gemms("gemm", k=LONG_K_MIN + 32, k_read=2 * LONG_K_MIN,
                                          **dict(kw, override=dict(ov, K_OVERREAD=True))):
                yield _variant(k, f"fused.{name}.{prec}.bm{bm}.kover{epi}", dict(codes, out_ptr=out),
                               dict(over.meta(), **strides))
        # a K with a tail of BLOCK_K: masks on the last BLOCK_K only, where the launch takes K_TAIL at all
        if not ov.get("EVEN_NK") and not masks_every_block_k(fused.SWAP_MN, bm):
            for epi, ktail, out in gemms("gemm", k=0, **dict(kw, override=dict(ov, K_TAIL=True))):
                yield _variant(k, f"fused.{name}.{prec}.bm{bm}.ktail{epi}", dict(codes, out_ptr=out),
                               dict(ktail.meta(), **strides))
        if bm == BLOCK_MS[0]:
            meta = launch("dequant", kind=1, fmt=fmt, bf16=bf16, k=0, override=ov, plain_scales=plain).meta()
            types = dict(codes, x_ptr=ptr(x_dt), rows_ptr=ptr(x_dt), block_expert_ptr=ptr(x_dt), gs_ptr=ptr(x_dt),
                         wgs_ptr="*fp32" if get_format(fmt).is_two_level else ptr(x_dt), out_ptr=ptr(x_dt))
            yield _variant(k, f"predequant.dequant.{name}.{_DT[x_dt]}.{tail}", types, dict(meta, **strides))


def gemm_variants(backend: str):
    k = fused_gemm._kernel(False)
    vendor = "rocm" if backend == "hip" else "cuda"

    def launch(name, **kw):  # e2m1 weights in the word order the vendor's weights take (word_order)
        order = word_order(vendor, kw.get("fmt") if kw.get("kind") == 1 else None, kw.get("k", 0))
        return select_launch(name, vendor, n=0, word_order=order, **kw)

    def gemms(name, **kw):
        return _epilogue_launches(lambda **e: launch(name, **e), **kw)

    for prec in ("ieee", "bf16"):
        bf16 = prec == "bf16"
        x_dt = torch.bfloat16 if bf16 else torch.float32
        for bm in BLOCK_MS:
            for even in (True, False):
                tail = "even" if even else "masked"
                ov = {"EVEN_NK": even}
                for fmt in weight_formats():
                    # MX weights whose scale bytes allow it take their multipliers from the bytes' bits
                    for plain in (False, True) if get_format(fmt).is_mx else (False,):
                        yield from _code_variants(k, launch, gemms, fmt, prec, bm, tail, ov, plain)
                    # mode "predequant": the GEMM on the float scratch
                    post = bf16 and get_format(fmt).has_global_scale
                    for epi, cfg, out in gemms("scratch_gemm", kind=0, bf16=bf16, has_post=post, block_m=bm, k=0,
                                               w_bytes=x_dt.itemsize, override=ov):
                        yield _variant(k, f"predequant.gemm.{prec}.bm{bm}.{tail}" + (".post" if post else "") + epi,
                                       dict(_gemm_types(x_dt, x_dt), out_ptr=out), cfg.meta())
                # float weights as given (scheme "bf16", FusedWeights.from_float)
                for w_dt in FLOAT_DTYPES:
                    for epi, cfg, out in gemms("gemm", kind=0, bf16=bf16, block_m=bm, k=0, w_bytes=w_dt.itemsize,
                                               override=ov):
                        yield _variant(k, f"float.w{_DT[w_dt]}.{prec}.bm{bm}.{tail}{epi}",
                                       dict(_gemm_types(x_dt, w_dt), out_ptr=out), cfg.meta())


def silu_variants(backend=None):
    k = fused_act._kernel()
    for out in ("fp32", "bf16"):  # float32 out, or the next GEMM's bf16 operand
        types = dict(h_ptr="*fp32", out_ptr="*" + out, inter="i32", stride_h="i32", stride_o="i32")
        yield _variant(k, "f32" if out == "fp32" else "f32-to-bf16", types, fused_act.SILU_META)


def swiglu_variants(backend=None):
    k = fused_act._swiglu_kernel()
    for out in ("fp32", "bf16"):
        types = dict(h_ptr="*fp32", out_ptr="*" + out, inter="i32", stride_h="i32", stride_o="i32", limit="fp32",
                     alpha="fp32")
        yield _variant(k, "f32" if out == "fp32" else "f32-to-bf16", types, fused_act.SILU_META)


def scale_variants(backend=None):
    k = fused_act._scale_kernel()
    types = dict(x_ptr="*fp32", g_ptr="*fp32", out_ptr="*bf16", n="i32")
    yield _variant(k, "f32-to-bf16", types, fused_act.SCALE_META)


def topk_sum_variants(backend=None):
    k = fused_act._sum_kernel()
    for out in ("fp32", "bf16", "fp16"):
        types = dict(h_ptr="*fp32", out_ptr="*" + out, H="i32", k="i32")
        yield _variant(k, "f32-to-" + out, types, fused_act.SUM_META)


def split_sum_variants(backend=None):
    """The K-split epilogue (and the one a GEMM launch leaves): with and
    without the bias and the row scale, and the activation after them."""
    k = fused_gemm._split_kernel(False)
    types = dict(part_ptr="*fp32", out_ptr="*fp32", bias_ptr="*fp32", ids_ptr="*i64", row_scale_ptr="*fp32",
                 total="i32", N="i32", splits="i32", stride_s="i32")
    for bias, rs, act in EPILOGUES:
        code = ACT_CODES[act] if act else 0
        for out in _act_outs(code, True):
            yield _variant(k, "split" + _epilogue_name(bias, rs, code, out), dict(types, out_ptr=out),
                           dict(fused_gemm.SPLIT_SUM_META, HAS_BIAS=bias, ROW_SCALE=rs, **act_constexprs(code)))


register("_moe_gemm_kernel", lambda: fused_gemm._kernel(False), gemm_variants)
register("_split_sum_kernel", lambda: fused_gemm._split_kernel(False), split_sum_variants)
register("silu_and_mul_kernel", fused_act._kernel, silu_variants)
register("swiglu_clamp_kernel", fused_act._swiglu_kernel, swiglu_variants)
register("scale_to_bf16_kernel", fused_act._scale_kernel, scale_variants)
register("topk_sum_kernel", fused_act._sum_kernel, topk_sum_variants)


def align_variants(backend=None):
    """Every padded size the host code can launch: pairs and experts up to
    moe_align's limits, padded to powers of two (BLOCK_M is a runtime int)."""
    k = moe_align._kernel(False)
    types = dict(ids_ptr="*i64", rows_ptr="*i64", block_expert_ptr="*i32", P="i32", E="i32", NB="i32", NROWS="i32",
                 BLOCK_M="i32")
    seen = set()
    for p in range(1, moe_align.MAX_PAIRS + 1):
        for e in range(1, moe_align.MAX_EXPERTS + 1):
            meta = moe_align.meta(p, e)
            key = tuple(sorted(meta.items()))
            if key not in seen:
                seen.add(key)
                yield _variant(k, f"p{meta['P_PAD']}.e{meta['E_PAD']}", types, meta)


register("_align_kernel", lambda: __import__("harness.kernels.moe_align", fromlist=["_kernel"])._kernel(False),
         align_variants)


def _chunk_e_pads():
    return sorted({moe_align.chunk_meta(e)["E_PAD"] for e in range(1, moe_align.MAX_EXPERTS + 1)})


def chunk_count_variants(backend=None):
    """The chunked layout's count launch, per expert count padded to a power of two."""
    k = moe_align._chunk_kernels(False)[0]
    types = dict(ids_ptr="*i64", counts_ptr="*i32", rows_ptr="*i64", block_expert_ptr="*i32", P="i32", NB="i32",
                 NROWS="i32", FILL_ROWS="i32", FILL_BLOCKS="i32")
    for e_pad in _chunk_e_pads():
        yield _variant(k, f"e{e_pad}", types, dict(moe_align.chunk_meta(e_pad), FILL=moe_align.FILL_CHUNK))


def chunk_start_variants(backend=None):
    k = moe_align._chunk_kernels(False)[1]
    types = dict(counts_ptr="*i32", starts_ptr="*i32", NC="i32", BLOCK_M="i32")
    for e_pad in _chunk_e_pads():
        yield _variant(k, f"e{e_pad}", types, moe_align.start_meta(e_pad))


def chunk_place_variants(backend=None):
    k = moe_align._chunk_kernels(False)[2]
    types = dict(ids_ptr="*i64", starts_ptr="*i32", rows_ptr="*i64", block_expert_ptr="*i32", P="i32", NROWS="i32",
                 BLOCK_M="i32")
    for e_pad in _chunk_e_pads():
        yield _variant(k, f"e{e_pad}", types, moe_align.chunk_meta(e_pad))


register("_chunk_count_kernel", lambda: moe_align._chunk_kernels(False)[0], chunk_count_variants)
register("_chunk_start_kernel", lambda: moe_align._chunk_kernels(False)[1], chunk_start_variants)
register("_chunk_place_kernel", lambda: moe_align._chunk_kernels(False)[2], chunk_place_variants)


def topk_variants(backend=None):
    """Every key-row width the routing can launch (E padded to a power of two; k is a runtime int),
    ids alone (softmax_topk) and with the weights of given scores or of the keys' softmax: renormalized
    or not, scaled or not."""
    from harness.kernels import topk

    k = topk._kernel(False)
    types = dict(keys_ptr="*fp32", scores_ptr="*fp32", ids_ptr="*i64", w_ptr="*fp32", T="i32", E="i32",
                 stride_t="i32", stride_s="i32", K="i32", scale="fp32")
    flags = ((False, False, False, False),) + tuple(
        (True, rn, sc, smx) for smx in (False, True) for rn in (False, True) for sc in (False, True))
    for e_pad in sorted({topk.meta(e)["E_PAD"] for e in range(1, topk.MAX_EXPERTS + 1)}):
        for weights, renorm, scaled, softmax in flags:
            meta = dict(topk.meta(e_pad), WEIGHTS=weights, RENORM=renorm, SCALED=scaled, SOFTMAX=softmax)
            name = (f"e{e_pad}" + ("_softmax" if softmax else "_w" if weights else "") + ("_renorm" if renorm else "")
                    + ("_scaled" if scaled else ""))
            yield _variant(k, name, types, meta)


register("_topk_kernel", lambda: __import__("harness.kernels.topk", fromlist=["_kernel"])._kernel(False),
         topk_variants)
