"""Where GEMM2's top-k combine runs, A/B in one process, median of
interleaved rounds, outputs checked bitwise equal: "pass", the GEMM's rows
summed by fused_act's one-pass topk_sum kernel after it; "epilogue", the
sum in the GEMM's epilogue where launch_config.combine_in_epilogue allows
(the tile that writes a token's last row sums its rows). B's time over A's
is the ratio.

python -m tools.combine_placement --shapes qwen3-30b-a3b,gpt-oss-120b,mixtral --schemes w_mxfp4,nvfp4 --tokens 16,4096

Times the layer's forward as `bench moe` builds it (tools.act_placement's
forward rows: silu, no bias), its CUDA graph captured under each side.
"""
from __future__ import annotations

import argparse
import contextlib

from harness.kernels import launch_config
from tools.act_placement import forward_rows
from tools.shape_sweep import main

SIDES = ("pass", "epilogue")


@contextlib.contextmanager
def _placed(side: str):
    """The combine placed as `side` for every launch selected inside (the rule select_launch reads)."""
    rule = launch_config.combine_in_epilogue
    if side == "pass":
        launch_config.combine_in_epilogue = lambda vendor, bf16, block_m: False
    try:
        yield
    finally:
        launch_config.combine_in_epilogue = rule


def _sides(text: str) -> tuple:
    sides = tuple(text.split(","))
    if len(sides) != 2 or len(set(sides)) != 2 or not set(sides) <= set(SIDES):
        raise argparse.ArgumentTypeError(f"--sides takes two different placements A,B from {', '.join(SIDES)}")
    return sides


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schemes", default="w_mxfp4,nvfp4,w_mxfp4_a_mxfp4")
    p.add_argument("--tokens", default="16,4096")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sides", default="pass,epilogue", type=_sides, help=f"A,B from {', '.join(SIDES)}")


if __name__ == "__main__":
    import sys

    sys.exit(main("tools.combine_placement", __doc__.splitlines()[0],
                  lambda shape, a, dev: forward_rows(shape, a, dev, _placed), _args))
