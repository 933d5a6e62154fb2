"""GPU time per kernel of one emulated MoE forward (torch.profiler).

python tools/profile_moe.py --shapes mixtral,qwen3-30b-a3b --tokens 1,16 --schemes nvfp4,w_mxfp4_a_mxfp4
prints JSON: per (shape, T, scheme) the kernels sorted by GPU time.
`--peer DIR` (the folder holding the triton_kernels package) profiles the
production peer of `bench moe` on the same weights instead (scheme
"triton_kernels", its W4A16 forward).
"""
import argparse
import json
import sys

import torch

from harness.moe import build_emulated_moe, calibrate_activation_scales
from harness.commands.bench.moe import SHAPES


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="mixtral,qwen3-30b-a3b")
    p.add_argument("--tokens", default="1,16")
    p.add_argument("--schemes", default="nvfp4,w_mxfp4_a_mxfp4")
    p.add_argument("--mode", default="auto")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--peer", default=None, help="profile triton_kernels from this folder instead of the harness")
    a = p.parse_args()
    dev = torch.device("cuda")
    out = []
    for shape in a.shapes.split(","):
        E, k, H, inter = SHAPES[shape]
        g = torch.Generator(device=dev).manual_seed(0)
        w13 = (torch.randn(E, 2 * inter, H, generator=g, device=dev) / H ** 0.5).to(torch.bfloat16)
        w2 = (torch.randn(E, H, inter, generator=g, device=dev) / inter ** 0.5).to(torch.bfloat16)
        x0 = torch.randn(256, H, generator=g, device=dev)
        lg0 = torch.randn(256, E, generator=g, device=dev)
        a1, a2 = calibrate_activation_scales(w13, w2, x0, lg0, top_k=k)
        for scheme in ["triton_kernels"] if a.peer else a.schemes.split(","):
            if a.peer:
                from harness.commands.bench import moe_peer
                tk, _, why = moe_peer.resolve(a.peer, dev)
                if tk is None:
                    raise SystemExit(f"profile_moe: --peer {a.peer}: {why}")
                moe = moe_peer.build(tk, w13, w2, k)
            else:
                moe = build_emulated_moe(scheme, w13, w2, top_k=k, a1_gscale=a1, a2_gscale=a2, backend="fused")
                moe.experts.fused_mode = a.mode
            for T in [int(t) for t in a.tokens.split(",")]:
                x = torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16)
                lg = torch.randn(T, E, generator=g, device=dev)
                with torch.no_grad():
                    for _ in range(3):
                        moe(x, lg)
                    torch.cuda.synchronize()
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                        for _ in range(5):
                            moe(x, lg)
                        torch.cuda.synchronize()
                ev = {}
                for e in prof.key_averages():
                    t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
                    if t > 0 and e.count > 0:
                        ev[e.key] = (t / 5, e.count // 5)
                total = sum(v[0] for v in ev.values())
                kernels = sum(v[1] for v in ev.values())
                top = sorted(ev.items(), key=lambda kv: -kv[1][0])[: a.top]
                out.append({"shape": shape, "T": T, "scheme": scheme, "device_us_per_forward": round(total, 1),
                            "launches_per_forward": kernels,
                            "top": [{"kernel": n[:90], "us": round(v[0], 1), "n": v[1]} for n, v in top]})
            del moe
    json.dump(out, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
