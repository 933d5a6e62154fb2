"""GPU smoke of the MoE layer, one command (`python -m tools.gpu_smoke OUT_DIR`):
run_checks on the device, CUDA-graph capture vs eager, torch.compile(fullgraph)
vs eager, the fused GEMM contract (2) at a medium shape in both precisions,
int64 offsets past 2^31 bytes, then the benchmark. Writes OUT_DIR/*.json as it goes."""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch


def _dump(out: Path, name: str, obj) -> None:
    (out / name).write_text(json.dumps(obj, indent=1, default=str))


def _guard(results: dict, name: str, fn):
    t0 = time.time()
    try:
        results[name] = fn()
    except Exception as exc:
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
    results[name + ".seconds"] = round(time.time() - t0, 2)


# inductor compiles take tens of seconds each: two representative cases
COMPILE_CASES = {("nvfp4", "torch"), ("w_mxfp4_a_mxfp4", "auto")}


def capture_and_compile(dev) -> dict:
    import harness.moe as hm
    from harness.moe.graphs import capture_matches_eager, compile_matches_eager

    g = torch.Generator(device=dev).manual_seed(0)
    E, H, I, T, k = 8, 256, 256, 16, 2
    w13 = torch.randn(E, 2 * I, H, generator=g, device=dev) * 0.05
    w2 = torch.randn(E, H, I, generator=g, device=dev) * 0.05
    x = torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16)
    lg = torch.randn(T, E, generator=g, device=dev)
    a1, a2 = hm.calibrate_activation_scales(w13, w2, x.float(), lg, top_k=k)
    res = {}
    for scheme in ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8", "w_mxfp8"):
        for backend in ("unfused", "fused"):
            for opb in ("auto", "torch"):
                if backend == "fused" and opb == "torch":
                    continue
                moe = hm.build_emulated_moe(scheme, w13, w2, top_k=k, a1_gscale=a1, a2_gscale=a2, backend=backend,
                                            op_backend=opb)
                key = f"{scheme}.{backend}.ops-{opb}"
                try:
                    res[key + ".capture"] = capture_matches_eager(moe, x, lg)
                except Exception as exc:
                    res[key + ".capture"] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
                if backend == "unfused" and (scheme, opb) in COMPILE_CASES:
                    try:
                        res[key + ".compile_inductor"] = compile_matches_eager(moe, x, lg)
                    except Exception as exc:
                        res[key + ".compile_inductor"] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
    return res


def gemm_contract(dev) -> dict:
    import harness.moe as hm
    from harness.kernels import fused_gemm as fused
    from harness.kernels.error_bound import c_prec, gemm_error_bound
    from harness.kernels.fused_weights import FusedWeights
    from harness.moe import ops
    from harness.moe.experts import _grouped_gemm_unfused

    g = torch.Generator(device=dev).manual_seed(1)
    E, H, I, T, k = 8, 1024, 512, 256, 2
    w13 = torch.randn(E, 2 * I, H, generator=g, device=dev) * 0.05
    x = torch.randn(T, H, generator=g, device=dev)
    lg = torch.randn(T, E, generator=g, device=dev)
    _, ids = hm.route(lg, k)
    ids = ids.reshape(-1)
    res = {}
    for scheme in ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp8"):
        s = hm.get_scheme(scheme)
        q, gs = hm.quantize_expert_weights(w13, s)
        fw = FusedWeights.from_quantized(q, gs)
        deq = ops.dequantize_expert_weights(q, gs, backend="torch")
        res[f"{scheme}.dequant_bitwise"] = bool(torch.equal(fused.fused_dequantize(fw).view(torch.int32),
                                                            deq.view(torch.int32)))
        a_gs = None
        xs = x.repeat_interleave(k, 0)
        if s.act_fmt is not None:
            if s.two_level:
                import harness.formats as hf

                a_gs = hf.nvfp4_global_scale(xs.abs().amax())
            xs, _ = hm.moe_kernel_quantize_input(xs, a_gs, s.quant_dtype, scale_mode=s.scale_mode)
        yu = _grouped_gemm_unfused(xs, ids, deq)
        for prec in ("ieee", "bf16"):
            yf = fused.moe_gemm(xs, ids, fw, precision=prec, a_gscale=a_gs)
            bound = gemm_error_bound(xs, ids, deq, c=c_prec(s, prec))
            ratio = float(((yf - yu).abs().double() / bound.clamp_min(1e-300)).max())
            res[f"{scheme}.{prec}.err_vs_bound"] = ratio
    return res


def int64_offsets(dev) -> dict:
    """Expert weights past 2^31 bytes: the last expert's rows must be right."""
    from harness.kernels import fp4_words
    from harness.kernels import fused_gemm as fused
    from harness.kernels.fused_weights import FusedWeights
    from harness.moe import ops
    import harness.formats as hf

    E, N, K = 40, 28672, 4096
    g = torch.Generator(device=dev).manual_seed(2)
    words = torch.randint(-2**31, 2**31, (E, N, K // 8), dtype=torch.int32, device=dev, generator=g)
    scales = torch.randint(120, 130, (E, N, K // 32), dtype=torch.uint8, device=dev, generator=g)
    q_last = hf.QuantizedTensor(fp4_words.unpack(words[-1:, :256]), scales[-1:, :256], None, "mxfp4")
    fw = FusedWeights(1, words.view(torch.uint8), scales, None, "mxfp4", E, N, K)
    x = torch.randn(16, K, device=dev, generator=g)
    ids = torch.full((16,), E - 1, dtype=torch.int64, device=dev)
    y = fused.moe_gemm(x, ids, fw, precision="ieee")[:, :256]
    ref = x @ ops.dequantize_expert_weights(q_last, None, backend="torch")[0].T
    del words, scales, fw
    torch.cuda.empty_cache()
    return {"bytes": E * N * K // 2, "max_abs_diff": float((y - ref).abs().max()),
            "close": bool(torch.allclose(y, ref, rtol=1e-4, atol=1e-3))}


def profile_forward(dev, tokens=(16, 4096), schemes=("w_mxfp4_a_mxfp4", "nvfp4"), iters=5) -> dict:
    """Where a Mixtral-shape forward spends its GPU time: torch.profiler over
    `iters` eager forwards (mode auto), CUDA kernel time per kernel name, in
    microseconds per forward, largest first."""
    import harness.moe as hm
    from harness.commands.bench.moe import SHAPES
    from torch.profiler import ProfilerActivity, profile

    E, k, H, I = SHAPES["mixtral"]
    g = torch.Generator(device=dev).manual_seed(0)
    w13 = (torch.randn(E, 2 * I, H, generator=g, device=dev) * H ** -0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, generator=g, device=dev) * I ** -0.5).to(torch.bfloat16)
    xs = {T: (torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16), torch.randn(T, E, generator=g, device=dev))
          for T in tokens}
    x0, lg0 = xs[max(tokens)]
    a1, a2 = hm.calibrate_activation_scales(w13, w2, x0[:256].float(), lg0[:256], top_k=k)
    res = {}
    for scheme in schemes:
        moe = hm.build_emulated_moe(scheme, w13, w2, top_k=k, a1_gscale=a1, a2_gscale=a2, backend="fused")
        for T, (x, lg) in xs.items():
            with torch.no_grad():
                for _ in range(2):
                    moe(x, lg)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(iters):
                        moe(x, lg)
                    torch.cuda.synchronize()
            rows = []
            for ev in prof.key_averages():
                dt = getattr(ev, "device_time_total", None)
                if dt is None:
                    dt = getattr(ev, "cuda_time_total", 0)
                if dt and ev.count:
                    rows.append((ev.key[:90], round(dt / iters, 1), ev.count // iters))
            rows.sort(key=lambda r: -r[1])
            res[f"{scheme}.T{T}"] = {"kernel_us_per_forward": rows[:25],
                                     "total_us": round(sum(r[1] for r in rows), 1)}
        del moe
        torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--tune", action="store_true", help="measure launch configs first and use the best")
    p.add_argument("--steps", default="checks,gemm,int64,bench,capture",
                   help="comma list of checks,gemm,int64,tune_predequant,profile,bench,capture")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    res: dict = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    from harness.kernels import launch_config as lc

    res["fused_launch_tables"] = lc.launch_tables()
    from harness.commands.run.moe import run_checks

    if a.tune:
        from tools import tune

        _guard(res, "dequant_exactness", lambda: tune.dequant_exactness(dev))
        ex = res.get("dequant_exactness", {})
        fast_ok = isinstance(ex, dict) and "error" not in ex and not any(v for k, v in ex.items() if k.endswith("fast1"))
        _guard(res, "tune", lambda: tune.tune(dev, fast_decode_ok=fast_ok))
        _dump(out, "smoke.json", res)
        best = res.get("tune", {}).get("best") if isinstance(res.get("tune"), dict) else None
        if best:
            for cls, cfg in best.items():
                lc.set_row("GPU_CONFIGS", cls, lc.LaunchRow(**cfg))
        res["gpu_configs_used"] = {row: cfg.settings() for row, cfg in lc.GPU_CONFIGS.items()}

    steps = set(a.steps.split(","))
    if "tune_predequant" in steps:
        from tools import tune

        _guard(res, "tune_predequant", lambda: tune.tune_predequant(dev))
        res["gpu_configs_used"] = {row: cfg.settings() for row, cfg in lc.GPU_CONFIGS.items()}
        _dump(out, "smoke.json", res)
    if "profile" in steps:
        _guard(res, "profile", lambda: profile_forward(dev))
        _dump(out, "smoke.json", res)
    if "checks" in steps:
        _guard(res, "run_checks", lambda: run_checks(0, dev))
        _dump(out, "smoke.json", res)
    if "gemm" in steps:
        _guard(res, "gemm_contract", lambda: gemm_contract(dev))
        _dump(out, "smoke.json", res)
    if "int64" in steps:
        _guard(res, "int64_offsets", lambda: int64_offsets(dev))
        _dump(out, "smoke.json", res)
    if not a.skip_bench and "bench" in steps:
        from harness.commands.bench import moe as bench

        for shape in ("qwen3-30b-a3b", "mixtral"):
            bp = argparse.ArgumentParser()
            bench.add_arguments(bp)
            args = bp.parse_args(["--shapes", shape, "--no-report"])
            _guard(res, f"bench.{shape}", lambda: bench.run(args))
            _dump(out, "smoke.json", res)
            if "results" in res.get(f"bench.{shape}", {}):
                (out / f"bench-{shape}.md").write_text(bench.markdown(res[f"bench.{shape}"]))
    if "capture" in steps:
        _guard(res, "capture_compile", lambda: capture_and_compile(dev))
        _dump(out, "smoke.json", res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
