"""Where GEMM1's activation runs, A/B of two placements in one process,
median of interleaved rounds, outputs checked bitwise equal. `--sides A,B`
(B's time over A's is the ratio) from: "after", the GEMM alone followed by
the one-pass kernel (fused_act); "selected", the activation in its launches
as select_launch places it (`moe_gemm(..., act=)`: the epilogue, or the
split-sum pass where launch_config.act_in_epilogue refuses it); "epilogue",
the same with act_in_epilogue allowing every launch (the split-sum pass
only where the K is split or the launch leaves the bias).

python -m tools.act_placement --shapes gpt-oss-120b,qwen3-30b-a3b,mixtral --schemes w_mxfp4,nvfp4 --tokens 16,4096
python -m tools.act_placement --sides selected,epilogue --what forward --shapes qwen3-30b-a3b --tokens 4096

--what gemm times GEMM1 alone (bf16 weights randn * H^-0.5 quantized by
quantize_expert_weights, bf16 x, `--bias` adds a float32 bias and
`--act` picks the activation); --what forward times the layer as `bench
moe` builds it (silu, no bias), its CUDA graph replayed, the other
placement by wrapping moe_gemm to run the one-pass kernel after it.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics

import torch

from harness.commands.bench.moe import SHAPES
from harness.kernels import fused_act, fused_gemm, launch_config
from harness.kernels.fused_weights import FusedWeights
from harness.kernels.pair_layout import pair_layout
from harness.moe import build_emulated_moe, calibrate_activation_scales, limits, quantize_expert_weights
from harness.moe.graphs import capture_forward
from tools.shape_sweep import graph_ms, main

ROUNDS = 3
SIDES = ("after", "selected", "epilogue")


def _after(moe_gemm):
    """moe_gemm with the activation left to the one-pass kernel after it (the placement before `act=`)."""
    def run(*a, act=None, act_dtype=torch.float32, **kw):
        h = moe_gemm(*a, **kw)
        return h if act is None else fused_act.ACTIVATIONS[act](h, act_dtype)
    return run


@contextlib.contextmanager
def _placed(side: str):
    """The activation placed as `side` (SIDES) for every moe_gemm call inside, through the module the layer calls."""
    gemm, rule = fused_gemm.moe_gemm, launch_config.act_in_epilogue
    if side == "after":
        fused_gemm.moe_gemm = _after(gemm)
    elif side == "epilogue":
        launch_config.act_in_epilogue = lambda swap_mn, block_m: True
    try:
        yield
    finally:
        fused_gemm.moe_gemm, launch_config.act_in_epilogue = gemm, rule


def _ab(sides, run) -> tuple:
    """`run(side)` -> (ms, output) for each of the two sides, ROUNDS interleaved: medians, rounds, bitwise equal."""
    times, outs = {s: [] for s in sides}, {}
    for _ in range(ROUNDS):
        for s in sides:
            with _placed(s):
                ms, outs[s] = run(s)
            times[s].append(ms)
    a, b = sides
    ma, mb = statistics.median(times[a]), statistics.median(times[b])
    return dict(sides=list(sides), a_ms=ma, b_ms=mb, ratio=round(mb / ma, 3),
                equal=torch.equal(outs[a], outs[b]), rounds=[times[a], times[b]])


def _gemm_rows(shape, a, dev) -> list:
    E, k, H, inter = SHAPES[shape]
    g = torch.Generator(device=dev).manual_seed(a.seed)
    w = torch.randn(E, 2 * inter, H, generator=g, device=dev) * H ** -0.5
    bias = torch.randn(E, 2 * inter, generator=g, device=dev) * 0.1 if a.bias else None
    rows = []
    for scheme in a.schemes.split(","):
        q, gs = quantize_expert_weights(w, scheme)
        fw = FusedWeights.from_quantized(q, gs)
        for T in [int(t) for t in a.tokens.split(",")]:
            ids = torch.topk(torch.randn(T, E, generator=g, device=dev), k, dim=1).indices.reshape(-1)
            x = torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16)
            layout = pair_layout(ids, E)
            kw = dict(precision="bf16", mode="auto", layout=layout, x_row_div=k, bias=bias)
            if fw.two_level:
                kw["a_gscale"] = torch.tensor(1.0, device=dev)
            for dt in (torch.bfloat16, torch.float32):
                def run(side):
                    fn = lambda: fused_gemm.moe_gemm(x, ids, fw, act=a.act, act_dtype=dt, **kw)  # noqa: E731
                    return graph_ms(fn), fn()
                rows.append(dict(shape=shape, what="gemm", scheme=scheme, T=T, block_m=layout[2], act=a.act,
                                 bias=a.bias, out=str(dt), **_ab(a.sides, run)))
                print(rows[-1], flush=True)
    return rows


def _forward_rows(shape, a, dev) -> list:
    E, k, H, inter = SHAPES[shape]
    g = torch.Generator(device=dev).manual_seed(a.seed)
    w13 = (torch.randn(E, 2 * inter, H, generator=g, device=dev) * H ** -0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, H, inter, generator=g, device=dev) * inter ** -0.5).to(torch.bfloat16)
    tokens = [int(t) for t in a.tokens.split(",")]
    inputs = {T: (torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16),
                  torch.randn(T, E, generator=g, device=dev)) for T in tokens}
    x0, lg0 = inputs[max(tokens)]
    a1, a2 = calibrate_activation_scales(w13, w2, x0[:256].float(), lg0[:256], top_k=k)
    rows = []
    for scheme in a.schemes.split(","):
        moe = build_emulated_moe(scheme, w13, w2, top_k=k, a1_gscale=a1, a2_gscale=a2, backend="fused")
        for T, (x, lg) in inputs.items():
            def run(side):
                replay, _ = capture_forward(moe, x.clone(), lg.clone())  # captured under the side's placement
                return round(limits.median_cuda_ms(replay, 20), 4), replay().clone()
            with torch.no_grad():
                rows.append(dict(shape=shape, what="forward", scheme=scheme, T=T, **_ab(a.sides, run)))
            print(rows[-1], flush=True)
    return rows


def _sides(text: str) -> tuple:
    sides = tuple(text.split(","))
    if len(sides) != 2 or len(set(sides)) != 2 or not set(sides) <= set(SIDES):
        raise argparse.ArgumentTypeError(f"--sides takes two different placements A,B from {', '.join(SIDES)}")
    return sides


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--what", choices=("gemm", "forward"), default="forward")
    p.add_argument("--schemes", default="w_mxfp4,nvfp4,w_mxfp4_a_mxfp4")
    p.add_argument("--tokens", default="16,4096")
    p.add_argument("--act", choices=tuple(fused_act.ACTIVATIONS), default="silu", help="--what gemm")
    p.add_argument("--bias", action="store_true", help="--what gemm: GEMM1 with a float32 bias")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sides", default="after,selected", type=_sides, help=f"A,B from {', '.join(SIDES)}")


if __name__ == "__main__":
    import sys

    def sweep(shape, a, dev):
        return (_gemm_rows if a.what == "gemm" else _forward_rows)(shape, a, dev)

    sys.exit(main("tools.act_placement", __doc__.splitlines()[0], sweep, _args))
