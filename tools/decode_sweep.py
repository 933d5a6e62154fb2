"""Split-K and tile sweep of the fused MoE GEMM at decode sizes (GPU).

python -m tools.decode_sweep --shapes mixtral,qwen3-30b-a3b --out sweep.json

Per shape, scheme (w_mxfp4_a_mxfp4, nvfp4), GEMM (w13, w2) and T (1, 16):
one GEMM launch (precision bf16, mode fused) timed by CUDA-graph replay
(10 launches per graph, median of 7 replays) at 1, 2 and 4 splits, at the
split `launch_config.select_launch` picks ("auto"; every column starts from
the tile the table picks, BLOCK_K 128 for K <= SHORT_K_MAX), with BLOCK_N 64 / BLOCK_K 128,
with the bf16 decode off ("no_bf16_decode") and the byte decode off too
("no_byte_decode"), and, where the device stores the weights in the "mma"
word order (MXFP4 on CUDA), the same launch on K-order words ("k_order":
mma.sync instead of the transposed product), and the table's launch with
its registers capped at 128 and 96 a thread ("maxnreg128", "maxnreg96": more
CTAs an SM), and on the same weights with FusedWeights.plain_scales off
("full_scales": every E8M0 multiplier through the cases of bytes 0 and 255;
the table's launches take PLAIN_SCALES where the bytes allow, as these
do), and where the launch folds e2m1's 2^126 into the multipliers, without
it ("no_fold": two bf16 multiplies a pair, FOLD_BIAS off); per weight tensor the dequant-only pass (mode
predequant) as the table has it, with the bf16 decode on, and with the
byte decode off.
Prints one JSON line per case; docs/benchmarks.md holds the figures.
"""
from __future__ import annotations

import json
from dataclasses import replace

import torch

import harness.moe as hm
from harness.kernels import fused_gemm as fused
from harness.kernels import launch_config as lc
from harness.kernels.fused_weights import FusedWeights
from harness.kernels.split_k import sm_count
from harness.commands.bench.moe import SHAPES
from tools import shape_sweep
from tools.shape_sweep import graph_ms, routed_rows


def sweep(shape: str, args, dev) -> list:
    E, k, H, inter = SHAPES[shape]
    g = torch.Generator(device=dev).manual_seed(0)
    weights = {"w13": (torch.randn(E, 2 * inter, H, generator=g, device=dev) * H ** -0.5).to(torch.bfloat16),
               "w2": (torch.randn(E, H, inter, generator=g, device=dev) * inter ** -0.5).to(torch.bfloat16)}
    rows = []
    for scheme in ("w_mxfp4_a_mxfp4", "nvfp4"):
        for name, w in weights.items():
            q, gs = hm.quantize_expert_weights(w, scheme)
            fw = FusedWeights.from_quantized(q, gs)
            # the same codes in K word order where the device's order differs (the "mma" order's baseline)
            fw_k = FusedWeights.from_quantized(q, gs, "k") if fw.word_order != "k" else None
            fw_full = replace(fw) if fw.plain_scales else None  # a copy of the same tensors keeps the full decode
            del q  # codes unpacked: only the kernel format is kept
            deq = dict(shape=shape, scheme=scheme, gemm=name)
            # Two interleaved rounds, the second kept: whichever variant runs
            # first measures 1.01-1.11x slower in either order (H200), a
            # one-time cost of the first [E, N, K] scratch.
            for _ in range(2):
                for label, cfg in (("dequant", None), ("dequant_bf16_decode", dict(BF16_DECODE=True)),
                                   ("dequant_no_byte_decode", dict(BYTE_DECODE=False))):
                    deq[label] = graph_ms(lambda: fused._dequantize(fw, torch.bfloat16, cfg))
            rows.append(deq)
            print(json.dumps(deq), flush=True)
            for T in (1, 16):
                ids, x, layout = routed_rows(E, k, fw.K, T, g, dev)
                a_gs = torch.tensor(300.0, device=dev)

                def run(cfg, weights=fw):
                    return fused._moe_gemm_impl(x, ids, weights, precision="bf16", a_gscale=a_gs, config=cfg,
                                                mode="fused", layout=layout)
                # the launch the table picks for this GEMM ("small", or "small_short_k" for a short K)
                chosen = lc.select_launch("gemm", lc.vendor_of(dev), kind=1, fmt=fw.fmt, bf16=True,
                                          has_post=fw.two_level, block_m=layout[2], n=fw.N, k=fw.K,
                                          pairs=T * k, experts=E, sm_count=sm_count(dev),
                                          word_order=fw.word_order, plain_scales=fw.plain_scales)
                base = {kk: getattr(chosen, kk) for kk in ("BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "SWAP_MN")
                        + lc.DECODE_FLAGS if getattr(chosen, kk) is not None}
                auto = chosen.SPLIT_K
                row = dict(shape=shape, scheme=scheme, gemm=name, T=T, N=fw.N, K=fw.K,
                           experts=int(torch.unique(ids).numel()), auto_split=auto)
                for splits in (1, 2, 4):
                    row[f"s{splits}"] = graph_ms(lambda: run(dict(base, SPLIT_K=splits)))
                row["auto"] = graph_ms(lambda: run(None))
                row["bn64_bk128"] = graph_ms(lambda: run(dict(base, BLOCK_N=64, BLOCK_K=128, SPLIT_K=auto)))
                row["no_bf16_decode"] = graph_ms(lambda: run(dict(base, SPLIT_K=auto, BF16_DECODE=False)))
                row["no_byte_decode"] = graph_ms(lambda: run(dict(base, SPLIT_K=auto, BYTE_DECODE=False,
                                                                  BF16_DECODE=False)))
                if fw_k is not None:  # K-order words: the transposed product does not apply (select_launch)
                    row["k_order"] = graph_ms(lambda: run(dict(base, SPLIT_K=auto), fw_k))
                for cap in (128, 96):  # the bm16 MXFP4 launch holds 154 registers uncapped: 3 CTAs an SM
                    row[f"maxnreg{cap}"] = graph_ms(lambda: run(dict(base, SPLIT_K=auto, maxnreg=cap)))
                if fw_full is not None:
                    row["full_scales"] = graph_ms(lambda: run(dict(base, SPLIT_K=auto), fw_full))
                if chosen.FOLD_BIAS:
                    row["no_fold"] = graph_ms(lambda: run(dict(base, SPLIT_K=auto, FOLD_BIAS=False)))
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    return shape_sweep.main("tools.decode_sweep", __doc__.splitlines()[0], sweep)


if __name__ == "__main__":
    raise SystemExit(main())
