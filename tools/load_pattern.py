"""Bandwidth of the decode GEMM's weight loads alone (GPU).

python -m tools.load_pattern --shapes mixtral,qwen3-30b-a3b

The fused GEMM's decode launches read each expert's e2m1 words as tiles of
BLOCK_N rows x BLOCK_K / 2 bytes per K step, the rows K / 2 bytes apart
("rows": the kernel format as it is). This times a kernel that does only
those loads (an XOR of the words, one int32 per row stored) over the same
grid (N / BLOCK_N tiles x the experts 16 tokens route to, seed 0), and the
same bytes stored tile-contiguous ("tiled": each K step's tile one
contiguous block, the layout a repacked format would have), at 3 and 4
pipeline stages; GB/s of the words read, CUDA-graph replay
(tools.shape_sweep.graph_ms). Prints one JSON line per GEMM;
docs/benchmarks.md holds the figures.
"""
from __future__ import annotations

import json

import torch
import triton
import triton.language as tl

from harness.commands.bench.moe import SHAPES
from tools import shape_sweep
from tools.shape_sweep import graph_ms


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def _load_kernel(w_ptr, out_ptr, row_stride, step_stride, tile_stride, expert_stride, steps,
                 BN: tl.constexpr, BKW: tl.constexpr, STAGES: tl.constexpr):
    pid_n = tl.program_id(0)
    e = tl.program_id(1).to(tl.int64)
    base = w_ptr + e * expert_stride + pid_n.to(tl.int64) * tile_stride
    r = tl.arange(0, BN)
    c = tl.arange(0, BKW)
    acc = tl.zeros((BN, BKW), tl.int32)
    for s in tl.range(0, steps, num_stages=STAGES):  # cp.async stages, as the GEMM's K loop
        acc ^= tl.load(base + s * step_stride + r[:, None] * row_stride + c[None, :])
    tl.store(out_ptr + (e * tl.num_programs(0) + pid_n) * BN + r, tl.reduce(acc, 1, _xor))


def routed(experts: int, top_k: int, tokens: int, dev) -> int:
    g = torch.Generator(device=dev).manual_seed(0)
    return int(torch.topk(torch.randn(tokens, experts, generator=g, device=dev), top_k, dim=1).indices.unique().numel())


def sweep(shape: str, args, dev) -> list:
    E, k, H, inter = SHAPES[shape]
    tokens = args.tokens
    used = routed(E, k, tokens, dev)
    rows = []
    for gemm, N, K in (("w13", 2 * inter, H), ("w2", H, inter)):
        words = K // 8
        w = torch.randint(-2**31, 2**31 - 1, (used, N, words), dtype=torch.int32, device=dev)
        row = dict(shape=shape, gemm=gemm, T=tokens, experts=used, N=N, K=K, MB=round(w.numel() * 4 / 1e6, 1))
        # the decode rows' BLOCK_K (256; 512 too), or 64 where K has a tail of those (gpt-oss: 2880 = 45 x 64)
        for block_k in [b for b in (256, 512) if words % (b // 8) == 0] or [64]:
            bkw = block_k // 8
            for bn in (64, 128):
                if N % bn:
                    continue
                out = torch.empty(used * (N // bn) * bn, dtype=torch.int32, device=dev)
                for layout, strides in (("rows", (words, bkw, bn * words, N * words)),
                                        ("tiled", (bkw, bn * bkw, bn * words, N * words))):
                    for stages in (3, 4):
                        def run():
                            _load_kernel[(N // bn, used)](w, out, *strides, words // bkw, BN=bn, BKW=bkw,
                                                          STAGES=stages, num_warps=4)
                        ms = graph_ms(run)
                        row[f"{layout}_bn{bn}_bk{block_k}_s{stages}_GBs"] = round(w.numel() * 4 / ms / 1e6)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    def tokens(p):
        p.add_argument("--tokens", type=int, default=16, help="tokens routed (their experts are the grid)")
    return shape_sweep.main("tools.load_pattern", __doc__.splitlines()[0], sweep, tokens)


if __name__ == "__main__":
    raise SystemExit(main())
