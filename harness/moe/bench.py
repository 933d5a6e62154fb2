"""`moe-harness bench moe`: emulated NVFP4 / MXFP4 MoE forward against the bf16
MoE forward (per-expert loop, cuBLAS) measured in the same run.

JSON to stdout; reports under reports/<stamp>-bench-moe/ (results.json,
summary.md). Times are medians of CUDA-event timings; "graph" rows replay a
CUDA-graph-captured forward (the whole emulated forward is capturable).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import time

import torch

SHAPES = {
    # name: (E, top_k, H, I)
    "mixtral": (8, 2, 4096, 14336),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "tiny": (4, 2, 64, 64),
}
# (shape, T) -> target (ms, or ratio to bf16 if a string "x1.2")
TARGETS = {("mixtral", 4096): "x1.2", ("mixtral", 16): 0.5, ("qwen3-30b-a3b", 16): 1.0,
           ("qwen3-30b-a3b", 4096): 5.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shapes", default="mixtral,qwen3-30b-a3b", help=f"comma list of {', '.join(SHAPES)}")
    parser.add_argument("--tokens", default="16,4096", help="comma list of T")
    parser.add_argument("--schemes", default="nvfp4,w_mxfp4_a_mxfp4")
    parser.add_argument("--precision", default="auto", help="fused GEMM precision: auto | ieee | bf16")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph rows")
    parser.add_argument("--device", default=None)
    parser.add_argument("--report-root", default="reports")
    parser.add_argument("--no-report", action="store_true")


def _time(fn, iters: int, warmup: int, device) -> float:
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def bf16_moe_forward(hidden, router_logits, w13, w2, top_k, renormalize=True):
    """The baseline: bf16 weights, per-expert loop over the routed tokens."""
    from .routing import route

    T, H = hidden.shape
    I = w2.shape[2]
    w, ids = route(router_logits, top_k, renormalize=renormalize)
    out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    for e in range(w13.shape[0]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = hidden[tok] @ w13[e].T
        a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
        y = a @ w2[e].T
        out.index_add_(0, tok, y.float() * w[tok, slot].unsqueeze(1))
    return out.to(hidden.dtype)


def _target_met(target, ms, bf16_ms):
    if target is None:
        return None
    if isinstance(target, str):
        return ms <= float(target[1:]) * bf16_ms
    return ms <= target


def run(args) -> dict:
    from . import build_emulated_moe, calibrate_activation_scales
    from harness.kernels import fused_gemm as _fused
    from .graphs import capture_forward

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokens = [int(t) for t in str(args.tokens).split(",") if t]
    schemes = [s for s in str(args.schemes).split(",") if s]
    rows = []
    for shape in [s for s in str(args.shapes).split(",") if s]:
        E, k, H, I = SHAPES[shape]
        g = torch.Generator(device=device).manual_seed(0)
        w13 = (torch.randn(E, 2 * I, H, generator=g, device=device) * (1 / H ** 0.5)).to(torch.bfloat16)
        w2 = (torch.randn(E, H, I, generator=g, device=device) * (1 / I ** 0.5)).to(torch.bfloat16)
        inputs = {T: (torch.randn(T, H, generator=g, device=device).to(torch.bfloat16),
                      torch.randn(T, E, generator=g, device=device)) for T in tokens}
        bf16_ms = {}
        for T, (x, lg) in inputs.items():
            with torch.no_grad():
                bf16_ms[T] = _time(lambda: bf16_moe_forward(x, lg, w13, w2, k), args.iters, args.warmup, device)
            rows.append({"shape": shape, "T": T, "scheme": "bf16", "path": "per-expert loop (cuBLAS)",
                         "ms": bf16_ms[T], "vs_bf16": 1.0})
        x0, lg0 = inputs[max(tokens)]
        a1, a2 = calibrate_activation_scales(w13[:, :, :], w2, x0[:256].float(), lg0[:256], top_k=k)
        for scheme in schemes:
            moe = build_emulated_moe(scheme, w13, w2, top_k=k, a1_gscale=a1, a2_gscale=a2, backend="fused",
                                     fused_precision=args.precision)
            prec = moe.experts._precision(device)
            for T, (x, lg) in inputs.items():
                target = TARGETS.get((shape, T))
                modes = ["fused"]
                if device.type == "cuda" and T * k >= _fused.PREDEQUANT_MIN_ROWS_PER_EXPERT * E:
                    modes.append("predequant")  # what mode "auto" picks here
                for mode in modes:
                    moe.experts.fused_mode = mode
                    with torch.no_grad():
                        ms = _time(lambda: moe(x, lg), args.iters, args.warmup, device)
                    rows.append({"shape": shape, "T": T, "scheme": scheme, "path": f"{mode} eager ({prec})",
                                 "ms": ms, "vs_bf16": ms / bf16_ms[T], "target": target,
                                 "target_met": _target_met(target, ms, bf16_ms[T])})
                    if device.type == "cuda" and not args.no_graph:
                        with torch.no_grad():
                            replay, _ = capture_forward(moe, x.clone(), lg.clone())
                            gms = _time(replay, args.iters, args.warmup, device)
                        del replay
                        rows.append({"shape": shape, "T": T, "scheme": scheme, "path": f"{mode} graph ({prec})",
                                     "ms": gms, "vs_bf16": gms / bf16_ms[T], "target": target,
                                     "target_met": _target_met(target, gms, bf16_ms[T])})
                moe.experts.fused_mode = "auto"
            moe = None  # free the GPU memory before empty_cache
            if device.type == "cuda":
                torch.cuda.empty_cache()
        w13 = w2 = inputs = None  # free the GPU memory before the next shape
    import triton

    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "triton": triton.__version__,
        "command": "moe-harness bench moe " + " ".join(sys.argv[3:] if sys.argv[1:3] == ["bench", "moe"] else sys.argv[1:]),
        "results": rows,
    }


def markdown(result: dict) -> str:
    lines = [f"MoE bench {result['date']} on {result['device']} (torch {result['torch']}, triton {result['triton']})", "",
             "| shape | T | scheme | path | ms | vs bf16 | target | met |", "|---|---|---|---|---|---|---|---|"]
    for r in result["results"]:
        t = r.get("target")
        lines.append(f"| {r['shape']} | {r['T']} | {r['scheme']} | {r['path']} | {r['ms']:.3f} | {r['vs_bf16']:.2f}x | "
                     f"{'' if t is None else (t if isinstance(t, str) else f'<= {t} ms')} | "
                     f"{'' if r.get('target_met') is None else ('yes' if r['target_met'] else 'no')} |")
    return "\n".join(lines) + "\n"


def main(args) -> int:
    result = run(args)
    if not args.no_report:
        from harness.report import ReportDir

        rd = ReportDir.create("bench-moe", root=args.report_root)
        rd.write_json("results.json", result)
        rd.write_text("summary.md", markdown(result))
        result["report_dir"] = str(rd.path)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m harness.moe.bench")
    add_arguments(p)
    sys.exit(main(p.parse_args()))
