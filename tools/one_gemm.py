"""One fused GEMM launch of a MoE shape, run a few times, for a profiler (GPU).

ncu --kernel-name regex:_moe_gemm --launch-skip 2 --launch-count 1 \\
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \\
    --section Occupancy --section SchedulerStats \\
    python -m tools.one_gemm --shape mixtral --gemm w13 --tokens 16

The launch is the one the table picks (mode "fused", precision "bf16") for
the GEMM's weights quantized from seeded random bf16 (`--scheme`'s weight
format) and `--tokens` tokens routed top-k by seeded random logits
(`tools.shape_sweep.routed_rows`, as tools.decode_sweep draws them, from
a generator of its own); `--full-scales` turns
FusedWeights.plain_scales off (the E8M0 multipliers through the cases of
bytes 0 and 255). Prints the launch it ran.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

import torch

import harness.moe as hm
from harness.commands.bench.moe import SHAPES
from harness.kernels import fused_gemm as fused
from harness.kernels.fused_weights import FusedWeights
from harness.moe.schemes import SCHEME_NAMES
from tools.shape_sweep import routed_rows


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tools.one_gemm", description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="mixtral", choices=sorted(SHAPES))
    p.add_argument("--scheme", default="w_mxfp4_a_mxfp4", choices=[n for n in SCHEME_NAMES if n != "bf16"])
    p.add_argument("--gemm", default="w13", choices=("w13", "w2"))
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--launches", type=int, default=3)
    p.add_argument("--full-scales", action="store_true")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("tools.one_gemm needs a CUDA GPU (it runs one kernel launch for a profiler)")
    if a.tokens < 1 or a.launches < 1:
        raise SystemExit("tools.one_gemm: --tokens and --launches must be >= 1")
    dev = torch.device("cuda")
    E, k, H, inter = SHAPES[a.shape]
    N, K = (2 * inter, H) if a.gemm == "w13" else (H, inter)
    g = torch.Generator(device=dev).manual_seed(0)
    w = (torch.randn(E, N, K, generator=g, device=dev) * K ** -0.5).to(torch.bfloat16)
    q, gs = hm.quantize_expert_weights(w, a.scheme)
    fw = FusedWeights.from_quantized(q, gs)
    del q, w
    if a.full_scales:
        fw = replace(fw)  # the same tensors, plain_scales off
    ids, x, layout = routed_rows(E, k, K, a.tokens, g, dev)
    a_gs = torch.tensor(300.0, device=dev)
    for _ in range(a.launches):
        fused._moe_gemm_impl(x, ids, fw, precision="bf16", a_gscale=a_gs, mode="fused", layout=layout)
    torch.cuda.synchronize()
    print(json.dumps(dict(shape=a.shape, scheme=a.scheme, gemm=a.gemm, T=a.tokens, N=N, K=K, fmt=fw.fmt,
                          word_order=fw.word_order, plain_scales=fw.plain_scales, launches=a.launches)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
