"""`moe-harness bench moe`: emulated NVFP4 / MXFP4 MoE forward against the bf16
grouped-GEMM forward, the production peer (triton_kernels' W4A16 MXFP4 MoE,
moe_peer.py) and the device's limits, all measured in the same run.

Every row reports its time eager and captured in a CUDA graph, the ratio to
the bf16 `torch._grouped_mm` forward (harness/moe/baselines.py), to the
peer's row of the same shape and T, to the weight-read limit of the experts
its tokens routed to and, for the row mode "auto" picks, the targets of its
token count and against the peer with their verdicts.
JSON to stdout; reports under reports/<stamp>-bench-moe/ (results.json,
summary.md). Times are medians of CUDA-event timings.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import time

import torch

from harness.moe import limits
from harness.moe.baselines import bf16_grouped_forward, bf16_loop_forward
from harness.moe.graphs import capture_forward
from harness.moe import build_emulated_moe, calibrate_activation_scales
from harness.kernels import fused_gemm as _fused
from harness.kernels import launch_config as lc
from harness.kernels.launch_config import resolve_mode, vendor_of
from harness.moe.schemes import get_scheme
from harness.commands.bench import moe_peer
from harness.commands.convention import refuse, report_dir

SHAPES = {
    # name: (E, top_k, H, I)
    "mixtral": (8, 2, 4096, 14336),
    "qwen3-30b-a3b": (128, 8, 2048, 768),
    "gpt-oss-120b": (128, 4, 2880, 2880),
    "tiny": (4, 2, 64, 64),
}
# Targets per token count: prefill against the bf16 grouped-GEMM
# forward of the same run, decode against the fp4 weight-read limit of the
# routed experts, single-token decode also against the predequant forward.
PREFILL_MAX_VS_GROUPED = 1.0
DECODE_MAX_VS_READ = 2.0
SINGLE_MAX_VS_READ = 3.0
SINGLE_MIN_SPEEDUP_VS_PREDEQUANT = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shapes", default="mixtral,qwen3-30b-a3b", help=f"comma list of {', '.join(SHAPES)}")
    parser.add_argument("--tokens", default="1,16,4096", help="comma list of T")
    parser.add_argument("--schemes", default="w_mxfp4,nvfp4,w_mxfp4_a_mxfp4")
    parser.add_argument("--peer", default="auto",
                        help="triton_kernels peer: auto (when it can run here) | none | DIR holding triton_kernels/")
    parser.add_argument("--precision", default="auto", help="fused GEMM precision: auto | ieee | bf16")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph rows")
    parser.add_argument("--no-loop", action="store_true", help="skip the bf16 per-expert loop rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)


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
    return limits.median_cuda_ms(fn, iters)


def _best(r: dict) -> float:
    return r.get("graph_ms", r["eager_ms"])


def _ratio(a, b):
    return None if a is None or b is None else a / b


def _targets(T: int, best: float, grouped: float, read_routed, predequant) -> dict:
    """The target that applies at this T, with its verdict."""
    if T == 1:
        out = {"target": f"<= {SINGLE_MAX_VS_READ}x routed read limit, >= {SINGLE_MIN_SPEEDUP_VS_PREDEQUANT}x "
                         "faster than predequant"}
        if read_routed is None or predequant is None:
            return {**out, "target_met": None}  # limits are measured on CUDA only
        ok = [best <= SINGLE_MAX_VS_READ * read_routed, predequant >= SINGLE_MIN_SPEEDUP_VS_PREDEQUANT * best]
    elif T <= 64:
        out = {"target": f"<= {DECODE_MAX_VS_READ}x read limit"}
        if read_routed is None:
            return {**out, "target_met": None}
        ok = [best <= DECODE_MAX_VS_READ * read_routed]
    else:
        out = {"target": f"<= {PREFILL_MAX_VS_GROUPED}x bf16 grouped GEMM"}
        ok = [best <= PREFILL_MAX_VS_GROUPED * grouped]
    out["target_met"] = all(ok)
    return out


def run(args) -> dict:

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    unknown = [s for s in str(args.shapes).split(",") if s and s not in SHAPES]
    if unknown:
        raise SystemExit(f"bench moe: --shapes {','.join(unknown)} unknown; choose from {', '.join(SHAPES)}")
    if args.precision not in _fused.PRECISIONS:
        raise SystemExit(f"bench moe: --precision {args.precision!r} unknown; choose from {', '.join(_fused.PRECISIONS)}")
    if args.precision == "bf16" and device.type != "cuda":
        raise SystemExit(f"bench moe: --precision bf16 needs a GPU (device here: {device.type}); the Triton "
                         "interpreter computes bf16 dots wrongly, use auto or ieee")
    tokens = [int(t) for t in str(args.tokens).split(",") if t]
    schemes = [s for s in str(args.schemes).split(",") if s]
    try:
        tk, peer_origin, peer_absent = moe_peer.resolve(getattr(args, "peer", "auto"), device)
    except moe_peer.PeerError as e:
        raise SystemExit(str(e)) from None
    lim = limits.measure(device)
    rows = []
    for shape in [s for s in str(args.shapes).split(",") if s]:
        E, k, H, I = SHAPES[shape]
        g = torch.Generator(device=device).manual_seed(args.seed)
        w13 = (torch.randn(E, 2 * I, H, generator=g, device=device) * (1 / H ** 0.5)).to(torch.bfloat16)
        w2 = (torch.randn(E, H, I, generator=g, device=device) * (1 / I ** 0.5)).to(torch.bfloat16)
        inputs = {T: (torch.randn(T, H, generator=g, device=device).to(torch.bfloat16),
                      torch.randn(T, E, generator=g, device=device)) for T in tokens}
        base = {}
        for T, (x, lg) in inputs.items():
            routed = limits.routed_experts(lg, k)
            common = {"shape": shape, "T": T, "routed_experts": routed,
                      "tc_limit_ms": limits.tc_limit_ms(T, k, H, I, lim["bf16_tflops"])}
            with torch.no_grad():
                grouped = {"eager_ms": _time(lambda: bf16_grouped_forward(x, lg, w13, w2, k), args.iters,
                                             args.warmup, device)}
                if device.type == "cuda" and not args.no_graph:
                    replay, _ = capture_forward(lambda a, b: bf16_grouped_forward(a, b, w13, w2, k),
                                                x.clone(), lg.clone())
                    grouped["graph_ms"] = _time(replay, args.iters, args.warmup, device)
                    del replay
            base[T] = _best(grouped)
            rows.append({**common, "scheme": "bf16", "path": "grouped_mm", **grouped, "best_ms": base[T],
                         "vs_grouped": 1.0})
            if not args.no_loop:
                with torch.no_grad():
                    ms = _time(lambda: bf16_loop_forward(x, lg, w13, w2, k), args.iters, args.warmup, device)
                rows.append({**common, "scheme": "bf16", "path": "per-expert loop", "eager_ms": ms, "best_ms": ms,
                             "vs_grouped": ms / base[T]})
        peer_best = {}
        if tk is not None:
            peer_best = _peer_rows(tk, shape, w13, w2, k, inputs, base, lim, args, device, rows)
        x0, lg0 = inputs[max(tokens)]
        a1, a2 = calibrate_activation_scales(w13, w2, x0[:256].float(), lg0[:256], top_k=k)
        for scheme in schemes:
            fmt = get_scheme(scheme).weight_fmt
            moe = build_emulated_moe(scheme, w13, w2, top_k=k, a1_gscale=a1, a2_gscale=a2, backend="fused",
                                     fused_precision=args.precision)
            prec = moe.experts._precision(device)
            # which multiplier decode the weights allow (FusedWeights.plain_scales), w13 then w2
            plain = [fw.plain_scales for fw in moe.experts._kernel_weights]
            orders = [fw.scale_order for fw in moe.experts._kernel_weights]  # launch_config.scale_order
            for T, (x, lg) in inputs.items():
                routed = limits.routed_experts(lg, k)
                read_routed = limits.read_limit_ms(routed, H, I, fmt, lim["copy_gbps"])
                auto = resolve_mode("auto", vendor_of(device), 1, T * k, E)  # the mode the layer's auto runs
                timed = {}
                for mode in ("fused", "predequant"):
                    if mode == "predequant" and device.type != "cuda":
                        continue  # the interpreter runs one path; predequant is a GPU speed mode
                    moe.experts.fused_mode = mode
                    timed[mode] = _timed_moe(moe, x, lg, args, device)
                moe.experts.fused_mode = "auto"
                for mode, r in timed.items():
                    best = _best(r)
                    pre = _best(timed["predequant"]) if "predequant" in timed else None
                    rows.append({
                        "shape": shape, "T": T, "scheme": scheme, "weight_format": fmt,
                        "path": f"{mode}{' (auto)' if mode == auto else ''} ({prec})", "plain_scales": plain,
                        "scale_order": orders,
                        **r, "best_ms": best,
                        "routed_experts": routed, "read_limit_ms": read_routed,
                        "tc_limit_ms": limits.tc_limit_ms(T, k, H, I, lim["bf16_tflops"]),
                        "vs_grouped": best / base[T], "vs_read_limit": _ratio(best, read_routed),
                        "vs_peer": _ratio(best, peer_best.get(T)),
                        "predequant_over_this": _ratio(pre, best),
                        **(_targets(T, best, base[T], read_routed, pre) if mode == auto else {}),
                        **(moe_peer.target(scheme, best, peer_best.get(T)) if mode == auto and tk is not None
                           else {}),
                    })
            moe = None  # free the GPU memory before empty_cache
            if device.type == "cuda":
                torch.cuda.empty_cache()
        w13 = w2 = inputs = None  # free the GPU memory before the next shape
    import triton

    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "triton": triton.__version__, "seed": args.seed,
        "limits": lim,
        "dispatch": lc.dispatch(vendor_of(device)),
        "peer": ({"name": "triton_kernels", "origin": peer_origin, "computes": moe_peer.COMPUTES}
                 if tk is not None else {"name": "triton_kernels", "absent": peer_absent}),
        "command": "moe-harness bench moe " + " ".join(sys.argv[3:] if sys.argv[1:3] == ["bench", "moe"] else sys.argv[1:]),
        "results": rows,
    }


def _peer_rows(tk, shape, w13, w2, k, inputs, base, lim, args, device, rows) -> dict:
    """Time the peer at every T of the shape; appends its rows, returns {T: best ms}.
    A shape the peer cannot run is one row saying why, never a crash: the
    harness rows of that shape then have no peer ratio."""
    E, two_i, H = w13.shape
    try:
        fwd = moe_peer.build(tk, w13, w2, k)
    except Exception as e:  # the peer's own limits (a shape its layouts refuse), named in the report
        rows.append({"shape": shape, "T": None, "scheme": moe_peer.SCHEME, "path": "triton_kernels",
                     "error": f"{type(e).__name__}: {e}"})
        return {}
    out = {}
    for T, (x, lg) in inputs.items():
        routed = limits.routed_experts(lg, k)
        read_routed = limits.read_limit_ms(routed, H, two_i // 2, "mxfp4", lim["copy_gbps"])
        row = {"shape": shape, "T": T, "scheme": moe_peer.SCHEME, "weight_format": "mxfp4",
               "path": "triton_kernels", "routed_experts": routed, "read_limit_ms": read_routed}
        try:
            r = _timed_moe(fwd, x, lg, args, device)
        except Exception as e:
            rows.append({**row, "error": f"{type(e).__name__}: {e}"})
            continue
        out[T] = _best(r)
        rows.append({**row, **r, "best_ms": out[T], "vs_grouped": out[T] / base[T],
                     "vs_read_limit": _ratio(out[T], read_routed), "vs_peer": 1.0})
    return out


def _timed_moe(moe, x, lg, args, device) -> dict:
    with torch.no_grad():
        r = {"eager_ms": _time(lambda: moe(x, lg), args.iters, args.warmup, device)}
        if device.type == "cuda" and not args.no_graph:
            replay, _ = capture_forward(moe, x.clone(), lg.clone())
            r["graph_ms"] = _time(replay, args.iters, args.warmup, device)
            del replay
    return r


def _f(v, fmt="{:.3f}"):
    return "" if v is None else fmt.format(v)


def markdown(result: dict) -> str:
    lim = result.get("limits", {})
    lines = [f"MoE bench {result['date']} on {result['device']} (torch {result['torch']}, triton {result['triton']}, "
             f"seed {result.get('seed')})", "",
             f"Measured limits: copy {_f(lim.get('copy_gbps'), '{:.0f}')} GB/s, "
             f"bf16 GEMM {_f(lim.get('bf16_tflops'), '{:.0f}')} TFLOP/s.", "",
             _peer_line(result.get("peer")), "",
             "| shape | T | scheme | path | eager ms | graph ms | vs grouped | vs peer | read limit ms (routed) | "
             "vs read | predequant / this | target | met | peer target | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["results"]:
        if "error" in r:
            lines.append(f"| {r['shape']} | {r.get('T') or ''} | {r['scheme']} | {r['path']} | "
                         f"not run: {r['error']} |" + " |" * 10)
            continue
        lines.append(
            f"| {r['shape']} | {r['T']} | {r['scheme']} | {r['path']} | {_f(r.get('eager_ms'))} | "
            f"{_f(r.get('graph_ms'))} | {_f(r.get('vs_grouped'), '{:.2f}x')} | {_f(r.get('vs_peer'), '{:.2f}x')} | "
            f"{_f(r.get('read_limit_ms'))} ({r.get('routed_experts', '')}) | {_f(r.get('vs_read_limit'), '{:.2f}x')} | "
            f"{_f(r.get('predequant_over_this'), '{:.1f}x')} | {r.get('target', '')} | {_met(r.get('target_met'))} | "
            f"{r.get('peer_target', '')} | {_met(r.get('peer_target_met'))} |")
    return "\n".join(lines) + "\n"


def _met(v) -> str:
    return "" if v is None else ("yes" if v else "**no**")


def _peer_line(peer) -> str:
    if not peer:
        return "Peer: none recorded."
    if "absent" in peer:
        return f"Peer {peer['name']}: not timed ({peer['absent']})."
    return f"Peer ({peer['origin']}): {peer['computes']}."


def main(args) -> int:
    try:
        result = run(args)
    except SystemExit as e:
        if isinstance(e.code, str):  # bad input, found before any weights were built: one line, exit 2
            return refuse("bench moe", e.code.removeprefix("bench moe: "))
        raise
    rd = report_dir(args, "bench-moe")
    rd.write_json("bench_moe.json", result)
    rd.write_text("bench_moe.md", markdown(result))
    result["report_dir"] = str(rd.path)
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m harness.commands.bench.moe")
    add_arguments(p)
    sys.exit(main(p.parse_args()))
