"""Where GEMM1's activation runs: in its launches (`moe_gemm(..., act=)`:
the epilogue or the split-sum pass, launch_config.act_in_epilogue) against
the GEMM alone followed by the one-pass kernel (fused_act), A/B in one
process, median of interleaved rounds, outputs checked bitwise equal.

python -m tools.act_placement --shapes gpt-oss-120b,qwen3-30b-a3b,mixtral --schemes w_mxfp4,nvfp4 --tokens 16,4096

--what gemm times GEMM1 alone (bf16 weights randn * H^-0.5 quantized by
quantize_expert_weights, bf16 x, `--bias` adds a float32 bias and
`--act` picks the activation); --what forward times the layer as `bench
moe` builds it (silu, no bias), its CUDA graph replayed, the other
placement by wrapping moe_gemm to run the one-pass kernel after it.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from harness.commands.bench.moe import SHAPES
from harness.kernels import fused_act, fused_gemm
from harness.kernels.fused_weights import FusedWeights
from harness.kernels.pair_layout import pair_layout
from harness.moe import build_emulated_moe, calibrate_activation_scales, limits, quantize_expert_weights
from harness.moe.graphs import capture_forward
from tools.shape_sweep import graph_ms, main

ROUNDS = 3


def _after(moe_gemm):
    """moe_gemm with the activation left to the one-pass kernel after it (the placement before `act=`)."""
    def run(*a, act=None, act_dtype=torch.float32, **kw):
        h = moe_gemm(*a, **kw)
        return h if act is None else fused_act.ACTIVATIONS[act](h, act_dtype)
    return run


def _ab(time_a, time_b) -> tuple:
    ta, tb = [], []
    for _ in range(ROUNDS):
        ta.append(time_a())
        tb.append(time_b())
    return statistics.median(ta), statistics.median(tb), ta, tb


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
                after = lambda: fused_act.ACTIVATIONS[a.act](fused_gemm.moe_gemm(x, ids, fw, **kw), dt)  # noqa: E731
                inside = lambda: fused_gemm.moe_gemm(x, ids, fw, act=a.act, act_dtype=dt, **kw)  # noqa: E731
                equal = torch.equal(after(), inside())
                m_after, m_in, t_after, t_in = _ab(lambda: graph_ms(after), lambda: graph_ms(inside))
                rows.append(dict(shape=shape, what="gemm", scheme=scheme, T=T, block_m=layout[2], act=a.act,
                                 bias=a.bias, out=str(dt), after_ms=m_after, in_launch_ms=m_in,
                                 ratio=round(m_in / m_after, 3), equal=equal, rounds=[t_after, t_in]))
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
    inside = fused_gemm.moe_gemm
    rows = []
    for scheme in a.schemes.split(","):
        moe = build_emulated_moe(scheme, w13, w2, top_k=k, a1_gscale=a1, a2_gscale=a2, backend="fused")
        for T, (x, lg) in inputs.items():
            outs = {}

            def timed(name, gemm):
                fused_gemm.moe_gemm = gemm  # the layer calls it through the module
                try:
                    replay, out = capture_forward(moe, x.clone(), lg.clone())
                    outs[name] = replay().clone()
                    return round(limits.median_cuda_ms(replay, 20), 4)
                finally:
                    fused_gemm.moe_gemm = inside

            with torch.no_grad():
                m_after, m_in, t_after, t_in = _ab(lambda: timed("after", _after(inside)),
                                                   lambda: timed("inside", inside))
            rows.append(dict(shape=shape, what="forward", scheme=scheme, T=T, after_ms=m_after, in_launch_ms=m_in,
                             ratio=round(m_in / m_after, 3), equal=torch.equal(outs["after"], outs["inside"]),
                             rounds=[t_after, t_in]))
            print(rows[-1], flush=True)
    return rows


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--what", choices=("gemm", "forward"), default="forward")
    p.add_argument("--schemes", default="w_mxfp4,nvfp4,w_mxfp4_a_mxfp4")
    p.add_argument("--tokens", default="16,4096")
    p.add_argument("--act", choices=tuple(fused_act.ACTIVATIONS), default="silu", help="--what gemm")
    p.add_argument("--bias", action="store_true", help="--what gemm: GEMM1 with a float32 bias")
    p.add_argument("--seed", type=int, default=0)


if __name__ == "__main__":
    import sys

    def sweep(shape, a, dev):
        return (_gemm_rows if a.what == "gemm" else _forward_rows)(shape, a, dev)

    sys.exit(main("tools.act_placement", __doc__.splitlines()[0], sweep, _args))
