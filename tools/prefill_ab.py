"""Five prefill A/Bs, graph ms (tools.shape_sweep.graph_ms), outputs checked
bitwise equal:

--what layout: the pair layout by the torch ops (pair_layout.sort_pairs)
against the chunked kernels (moe_align.align_pairs_chunked), the chunked
start program at each of --start-rows chunks a step;
--what long-k: each W4A16 GEMM alone (seed-0 bf16 weights randn * K^-0.5
quantized by quantize_expert_weights, bf16 x, top-k of random logits) as
the tables launch it against the "large" row (its split-K as the table
computes it), ROUNDS interleaved timings each, the ratio of their minima;
--what k-over: the same GEMMs on weights read past a ragged K
(launch_config.read_k, FusedWeights.k_over) as the tables launch them
against the same weights with the read not claimed (k_over 0: every
BLOCK_K masked);
--what medium: the same GEMMs as the tables launch them against the decode
row the launch took before "medium" ("small_short_k" up to SHORT_K_MAX,
else "small"; each side's split-K as the table computes it for its tile);
at BLOCK_M 32 where the tables take "medium";
--what nvfp4-order: each NVFP4 GEMM alone (precision "bf16", the post
factor of a_gscale 1) on e2m1 words in the "k" order, as the tables launch
them (the untransposed product), against the same codes in the "mma" order
as the tables launch those (at BLOCK_M 64 and up the transposed product).

python -m tools.prefill_ab --what layout --shapes qwen3-30b-a3b,gpt-oss-120b,mixtral --tokens 64,512,4096,16384
python -m tools.prefill_ab --what long-k --shapes qwen3-30b-a3b,mixtral --tokens 1024,4096
python -m tools.prefill_ab --what k-over --shapes gpt-oss-120b --tokens 1024,4096
python -m tools.prefill_ab --what medium --shapes gpt-oss-120b --tokens 1024
python -m tools.prefill_ab --what nvfp4-order --shapes qwen3-30b-a3b,gpt-oss-120b --tokens 4096
"""
from __future__ import annotations

import copy

import torch

from harness.commands.bench.moe import SHAPES
from harness.kernels import fused_gemm, moe_align, pair_layout
from harness.kernels import launch_config as lc
from harness.kernels.fused_weights import FusedWeights
from harness.moe import quantize_expert_weights
from tools.shape_sweep import graph_ms, main

ROUNDS = 3
_OTHER = {"long-k": "large_ms", "k-over": "masked_ms", "medium": "decode_row_ms",
          "nvfp4-order": "mma_order_ms"}  # the B side's name


def _ids(E, k, T, g, dev):
    return torch.topk(torch.randn(T, E, generator=g, device=dev), k, dim=1).indices.reshape(-1)


def _layout_rows(shape, a, dev) -> list:
    E, k, _, _ = SHAPES[shape]
    rows = []
    for T in [int(t) for t in a.tokens.split(",")]:
        ids = _ids(E, k, T, torch.Generator(device=dev).manual_seed(T), dev)
        bm = pair_layout.block_m_for(ids.numel(), E)
        want = pair_layout.sort_pairs(ids, E, bm)
        row = dict(shape=shape, what="layout", T=T, pairs=ids.numel(), block_m=bm,
                   sort_ms=graph_ms(lambda: pair_layout.sort_pairs(ids, E, bm)), chunked={})
        kept = moe_align.START_ROWS
        try:
            for cb in [int(c) for c in a.start_rows.split(",")]:
                moe_align.START_ROWS = cb
                got = moe_align.align_pairs_chunked(ids, E, bm)
                equal = torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
                row["chunked"][cb] = dict(ms=graph_ms(lambda: moe_align.align_pairs_chunked(ids, E, bm)), equal=equal)
        finally:
            moe_align.START_ROWS = kept
        print(row, flush=True)
        rows.append(row)
    return rows


def _gemm_rows(shape, a, dev) -> list:
    """--what long-k, k-over, medium and nvfp4-order: per GEMM and T, the tables' launch (A) against the other
    side (B); ratio: A's minimum over B's."""
    E, k, H, inter = SHAPES[shape]
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    nvfp4 = a.what == "nvfp4-order"
    for gemm, (N, K) in (("w13", (2 * inter, H)), ("w2", (H, inter))):
        q, gs = quantize_expert_weights(torch.randn(E, N, K, generator=g, device=dev) * K ** -0.5,
                                        "nvfp4" if nvfp4 else "w_mxfp4")
        fw = FusedWeights.from_quantized(q, gs, word_order="k" if nvfp4 else None)
        fw_mma = FusedWeights.from_quantized(q, gs, word_order="mma") if nvfp4 else None
        for T in [int(t) for t in a.tokens.split(",")]:
            ids = _ids(E, k, T, g, dev)
            x_div = k if gemm == "w13" else 1
            x = torch.randn(T * k // x_div, K, generator=g, device=dev).to(torch.bfloat16)
            kw = dict(precision="bf16", mode="fused", layout=pair_layout.pair_layout(ids, E), x_row_div=x_div)
            if nvfp4:
                kw["a_gscale"] = torch.tensor(1.0, device=dev)
            large = lc.GPU_CONFIGS["large"].settings()
            decode = lc.GPU_CONFIGS["small_short_k" if K <= lc.SHORT_K_MAX else "small"].settings()
            masked = copy.copy(fw)  # the same tensors and flags, the read past K not claimed
            masked.k_over = 0

            def table():
                return fused_gemm.moe_gemm(x, ids, fw, **kw)

            def old():
                if nvfp4:
                    return fused_gemm.moe_gemm(x, ids, fw_mma, **kw)
                if a.what == "k-over":
                    return fused_gemm.moe_gemm(x, ids, masked, **kw)
                if a.what == "medium":
                    return fused_gemm.moe_gemm(x, ids, fw, config=decode, **kw)
                return fused_gemm.moe_gemm(x, ids, fw, config=large, **kw)
            t_new, t_old = [], []
            for _ in range(ROUNDS):  # interleaved: a drift in clocks reaches both
                t_new.append(graph_ms(table))
                t_old.append(graph_ms(old))
            launch = lc.select_launch("gemm", "cuda", kind=1, fmt=fw.fmt, bf16=True, has_post=nvfp4,
                                      block_m=kw["layout"][2], n=N,
                                      k=K, word_order=fw.word_order, scale_order=fw.scale_order or "k",
                                      k_read=fw.k_read)
            extra = {}
            if nvfp4:  # the row the "mma" words take
                extra["mma_row"] = lc.select_launch("gemm", "cuda", kind=1, fmt=fw.fmt, bf16=True, has_post=True,
                                                    block_m=kw["layout"][2], n=N, k=K, word_order="mma",
                                                    scale_order=fw_mma.scale_order or "k").row
            rows.append(dict(shape=shape, what=a.what, gemm=gemm, K=K, k_read=fw.k_read, T=T, **extra,
                             block_m=kw["layout"][2], table_row=launch.row, k_overread=bool(launch.K_OVERREAD),
                             table_ms=t_new, **{_OTHER[a.what]: t_old},
                             ratio=round(min(t_new) / min(t_old), 3), equal=bool(torch.equal(table(), old()))))
            print(rows[-1], flush=True)
    return rows


def _sweep(shape, a, dev) -> list:
    return _layout_rows(shape, a, dev) if a.what == "layout" else _gemm_rows(shape, a, dev)


def _arguments(p) -> None:
    p.add_argument("--what", choices=("layout", "long-k", "k-over", "medium", "nvfp4-order"), default="layout")
    p.add_argument("--tokens", default="4096")
    p.add_argument("--start-rows", default=str(moe_align.START_ROWS),
                   help="--what layout: chunks a step of the start program, comma-separated")


if __name__ == "__main__":
    raise SystemExit(main("tools.prefill_ab", __doc__.split("\n\n")[0], _sweep, _arguments))
