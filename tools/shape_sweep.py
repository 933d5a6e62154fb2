"""What the per-shape GPU sweeps in tools/ share: CUDA-graph timing of one
launch and the command line (--shapes of `moe-harness bench moe`'s SHAPES,
--out JSON)."""
from __future__ import annotations

import argparse
import json
from typing import Callable, Optional

import torch

from harness.commands.bench.moe import SHAPES
from harness.kernels.pair_layout import pair_layout
from harness.moe import limits


def graph_ms(fn) -> float:
    """fn's time: 10 launches captured in one CUDA graph, median of 7
    replays (after two eager warm-ups), per launch, ms."""
    fn()
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return round(limits.median_cuda_ms(graph.replay, 7) / 10, 4)


def routed_rows(E: int, k: int, K: int, T: int, g: torch.Generator, dev) -> tuple:
    """A decode GEMM's inputs as the sweeps draw them from `g`: T tokens
    routed top-k by random logits -> (ids [T k], x [T k, K] float32 holding
    bf16 values, the pair layout)."""
    ids = torch.topk(torch.randn(T, E, generator=g, device=dev), k, dim=1).indices.reshape(-1)
    x = torch.randn(T * k, K, generator=g, device=dev).to(torch.bfloat16).float()
    return ids, x, pair_layout(ids, E)


def main(prog: str, description: str, sweep: Callable[[str, argparse.Namespace, torch.device], list],
         add_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> int:
    """Parse --shapes (and the tool's own arguments), check them, run
    `sweep(shape, args, device)` per shape on the GPU, write --out."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    p.add_argument("--shapes", default="mixtral,qwen3-30b-a3b")
    if add_arguments is not None:
        add_arguments(p)
    p.add_argument("--out", default=None, help="also write all rows to this JSON file")
    a = p.parse_args()
    unknown = [s for s in a.shapes.split(",") if s not in SHAPES]
    if unknown:
        raise SystemExit(f"{prog}: --shapes {','.join(unknown)} unknown; choose from {', '.join(SHAPES)}")
    if not torch.cuda.is_available():
        raise SystemExit(f"{prog} needs a CUDA GPU (it times kernel launches)")
    rows = [r for s in a.shapes.split(",") for r in sweep(s, a, torch.device("cuda"))]
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
