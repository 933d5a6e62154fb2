"""`moe-harness bench multigpu --checkpoint DIR`: moe-emu on 1 GPU, on 2 GPUs
model parallel (`parallelize=True`) and on 2 GPUs data parallel (`accelerate
launch`, 2 processes). Per mode: load time, peak memory per GPU
(torch.cuda.max_memory_allocated per device), tokens/s for loglikelihood and
for generation, and the memory computed on paper (memory_model.py) with the
measured/paper ratio. JSON to stdout and to reports/<ts>-bench-multigpu/.

Each mode runs in its own process (`python -m harness.commands.bench.multigpu
worker ...`), so load time and peak memory are that mode's alone. Requests are
synthetic and seeded: `--requests` loglikelihood requests of `--ctx-len`
tokens plus a 4-token continuation, `--gen-requests` prompts of 16 tokens
generating `--gen-tokens` tokens greedily (no stop string). Data parallel
shards the requests by rank as lm-eval does (rank::world_size); its tokens/s
is all tokens over the slowest rank's time.

On a host without GPUs the same runs go to the CPU (data parallel: torchrun
with 2 processes, accelerate on gloo; `accelerate launch --cpu` would start
one): a dry check of the code path, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from harness.lmeval.adapter import MoEEmuLM
from harness.util.offline import enter_offline
from harness.util.interrupt import say_line
from harness.emulation import synthetic_loader
from harness.lmeval.adapter import resolve_model_dir
from harness.schemes import NVFP4
from harness.models.shapes import from_hf_config
from harness.emulation import memory_model
from harness.emulation.moe_swap import keep_codes_for
from harness.schemes import get_scheme
from harness.commands.convention import report_dir
from harness.schemes import EXPERT_BACKENDS

MODES = ("single", "model", "data")
CONT_TOKENS = 4
PROMPT_TOKENS = 16
ALPHABET = "0123456789+="


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="model folder: a quantized checkpoint (checkpoint synth: compressed-tensors, ModelOpt or the gpt-oss "
                             "layout) or a float one; 'tiny-moe' = bundled")
    parser.add_argument("--scheme", default=None, help="default: the checkpoint's own scheme, else nvfp4")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs for the model- and data-parallel modes")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--ctx-len", type=int, default=256)
    parser.add_argument("--gen-requests", type=int, default=32)
    parser.add_argument("--gen-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--backend", default="unfused", choices=EXPERT_BACKENDS, help="experts backend")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs of each phase per rank; the median counts (one run of a 1 s phase spread 1.1-2.0x)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per mode")


# -- requests -------------------------------------------------------------------------------
def make_requests(n: int, ctx_len: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    text = lambda k: "".join(rng.choice(ALPHABET) for _ in range(k))  # noqa: E731
    return [(text(ctx_len), text(CONT_TOKENS)) for _ in range(n)]


def make_prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed + 1)
    return ["".join(rng.choice(ALPHABET) for _ in range(PROMPT_TOKENS)) for _ in range(n)]


# -- worker (one mode, one process or one rank) -----------------------------------------------
def _sync(torch):
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)


def _peaks(torch) -> dict:
    if not torch.cuda.is_available():
        return {}
    return {f"cuda:{i}": torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())}


class _StepCounter:
    """Counts generated tokens from the model's forward calls: a prefill call
    yields one token per row, every one-token decode call one per row."""

    def __init__(self):
        self.tokens = 0

    def __call__(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            self.tokens += ids.shape[0]


def worker(args) -> dict:
    import torch
    from lm_eval.api.instance import Instance


    # no certified oracle here: a fused model releases its unpacked codes (moe_swap.keep_codes_for)
    kwargs = dict(pretrained=args.checkpoint, scheme=args.scheme, batch_size=args.batch_size, dtype="bfloat16",
                  backend=args.backend, oracle=False)
    if args.mode == "model":
        kwargs.update(parallelize=True, device_map=args.device_map or "auto")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            torch.zeros(1, device=f"cuda:{i}")  # the allocator of a device exists only once it is used
            torch.cuda.reset_peak_memory_stats(i)
    t = time.perf_counter()
    lm = MoEEmuLM(**kwargs)
    _sync(torch)
    load_s = time.perf_counter() - t
    after_load = _peaks(torch)
    rank, world = lm.rank, lm.world_size

    reqs = make_requests(args.requests, args.ctx_len, args.seed)[rank::world]
    ll = [Instance("loglikelihood", {}, (c, x), i) for i, (c, x) in enumerate(reqs)]
    ll_tokens = sum(len(lm.tok_encode(c)) + len(lm.tok_encode(x)) for c, x in reqs)
    prompts = make_prompts(args.gen_requests, args.seed)[rank::world]
    # Untimed warm-up on the timed shapes: Triton's JIT (and its on-disk cache, which the
    # mode that runs first fills for the later ones) and library start-up stay out of every timing.
    lm.loglikelihood(ll[:args.batch_size], disable_tqdm=True)
    lm.generate_until([Instance("generate_until", {}, (p, {"until": [], "max_gen_toks": 2}), i)
                       for i, p in enumerate(prompts[:args.batch_size])], disable_tqdm=True)
    _sync(torch)
    ll_runs = []
    for _ in range(args.repeats):  # each phase timed `repeats` times, all ranks starting together
        lm.barrier()
        t = time.perf_counter()
        lm.loglikelihood(ll, disable_tqdm=True)
        _sync(torch)
        ll_runs.append(time.perf_counter() - t)

    gen = [Instance("generate_until", {}, (p, {"until": [], "max_gen_toks": args.gen_tokens}), i)
           for i, p in enumerate(prompts)]
    gen_runs, gen_tokens = [], None
    for _ in range(args.repeats):
        counter = _StepCounter()
        handle = lm.model.register_forward_pre_hook(counter, with_kwargs=True)
        lm.barrier()
        t = time.perf_counter()
        lm.generate_until(gen, disable_tqdm=True)
        _sync(torch)
        gen_runs.append(time.perf_counter() - t)
        handle.remove()
        gen_tokens = counter.tokens  # greedy: every repeat generates the same tokens

    row = {"rank": rank, "load_s": load_s, "ll_tokens": ll_tokens, "ll_s": statistics.median(ll_runs),
           "ll_s_runs": ll_runs, "gen_tokens": gen_tokens, "gen_s": statistics.median(gen_runs),
           "gen_s_runs": gen_runs, "peak_after_load": after_load, "peak": _peaks(torch), "device": str(lm.device),
           "parallel": lm.parallel_info(), "device_map": {k: str(v) for k, v in
                                                          (getattr(lm.model, "hf_device_map", None) or {}).items()},
           "checkpoint_scheme": lm.checkpoint_scheme, "scheme": lm.scheme}
    rows = lm.gather_object(row)
    return None if rank != 0 else {"mode": args.mode, "ranks": rows}


def worker_main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_multigpu worker")
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--scheme", required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--ctx-len", type=int, required=True)
    p.add_argument("--gen-requests", type=int, required=True)
    p.add_argument("--gen-tokens", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device-map", default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    enter_offline(os.environ.get("HARNESS_CACHE_DIR"))
    result = worker(args)
    if result is not None:
        tmp = Path(args.out + ".tmp")
        tmp.write_text(json.dumps(result, default=str))
        os.replace(tmp, args.out)
    _leave_process_group()
    return 0


def _leave_process_group() -> None:
    """Data parallel: every rank waits for the others, then tears the process
    group down before exiting; a rank that exits with gloo's threads still
    running can abort ("terminate called without an active exception", seen
    once in the CPU dry run)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# -- orchestration ---------------------------------------------------------------------------
def default_scheme(checkpoint: str) -> str:

    folder = resolve_model_dir(checkpoint)

    return synthetic_loader.checkpoint_scheme(folder) if synthetic_loader.loads_as_model(folder) else NVFP4.name


def worker_command(mode: str, args, out: str, gpus: int, on_gpu: bool, device_map: str | None = None) -> list[str]:
    tail = ["--mode", mode, "--checkpoint", args.checkpoint, "--scheme", args.scheme,
            "--requests", str(args.requests), "--ctx-len", str(args.ctx_len),
            "--gen-requests", str(args.gen_requests), "--gen-tokens", str(args.gen_tokens),
            "--batch-size", str(args.batch_size), "--backend", args.backend, "--seed", str(args.seed), "--repeats", str(args.repeats), "--out", out]
    if device_map:
        tail += ["--device-map", device_map]
    if mode != "data":
        return [sys.executable, "-m", "harness.commands.bench.multigpu", "worker", *tail]
    if on_gpu:
        launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(gpus),
                  "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m"]
    else:  # `accelerate launch --cpu` runs one process; torchrun gives accelerate its gloo process group
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus), "-m"]
    return [*launch, "harness.commands.bench.multigpu", "worker", *tail]


def summarize(mode_result: dict, paper: dict | None) -> dict:
    ranks = mode_result["ranks"]
    ll_tokens = sum(r["ll_tokens"] for r in ranks)
    gen_tokens = sum(r["gen_tokens"] for r in ranks)
    ll_s = max(r["ll_s"] for r in ranks)
    gen_s = max(r["gen_s"] for r in ranks)
    peak = {}
    for r in ranks:  # data parallel: each rank reports its own device
        for dev, b in r["peak"].items():
            if mode_result["mode"] != "data" or dev == r["device"]:
                peak[dev] = max(peak.get(dev, 0), b)
    out = {"mode": mode_result["mode"], "processes": len(ranks), "load_s": round(max(r["load_s"] for r in ranks), 2),
           "loglikelihood_tokens": ll_tokens, "loglikelihood_tok_s": round(ll_tokens / ll_s, 1) if ll_s else None,
           "generation_tokens": gen_tokens, "generation_tok_s": round(gen_tokens / gen_s, 1) if gen_s else None,
           "peak_gib": {d: round(b / 2**30, 2) for d, b in sorted(peak.items())},
           "device_map_devices": sorted(set(ranks[0]["device_map"].values())) if ranks[0]["device_map"] else [],
           "parallel": ranks[0]["parallel"]}
    if paper is not None:
        out["paper_gib"] = {d: round(v["peak"] / 2**30, 2) for d, v in paper.items()}
        out["measured_over_paper"] = {d: round(peak[d] / paper[d]["peak"], 3) for d in paper if d in peak}
    return out


def paper_for(args, mode_result: dict) -> dict | None:
    """Memory on paper for quantized checkpoints (synthetic_loader.FORMATS: the
    emulation's own layout); None for float checkpoints, which keep their float
    experts too."""

    folder = resolve_model_dir(args.checkpoint)
    if not synthetic_loader.loads_as_model(folder):
        return None
    cfg = synthetic_loader.read_config(folder)

    scheme = get_scheme(synthetic_loader.checkpoint_scheme(folder)).name
    shape = from_hf_config(cfg)
    keep = keep_codes_for(args.backend, oracle=False)  # as worker() loads the model
    batch = min(args.batch_size, max(1, args.requests // len(mode_result["ranks"])))
    r0 = mode_result["ranks"][0]
    if mode_result["mode"] == "data":
        out = {}
        for r in mode_result["ranks"]:
            dm = {k: r["device"] for k in r["device_map"]} or {"": r["device"]}
            out.update(memory_model.per_device(shape, scheme, dm, batch, args.ctx_len + CONT_TOKENS,
                                               backend=args.backend, keep_codes=keep))
        return out
    return memory_model.per_device(shape, scheme, r0["device_map"] or {"": r0["device"]}, batch,
                                   args.ctx_len + CONT_TOKENS, backend=args.backend, keep_codes=keep)


def run(args, device_map: str | None = None, progress=None) -> dict:
    import torch

    on_gpu = torch.cuda.is_available()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"--modes: unknown mode {bad[0]!r}; known: {', '.join(MODES)}")
    if args.repeats < 1:
        raise ValueError(f"--repeats: at least one timed run per phase, got {args.repeats}")
    if on_gpu and args.gpus > torch.cuda.device_count() and any(m != "single" for m in modes):
        raise ValueError(f"--gpus {args.gpus}: only {torch.cuda.device_count()} GPU(s) visible")
    args.scheme = args.scheme or default_scheme(args.checkpoint)
    results, raw = [], []
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-multigpu-") as tmp:
        for mode in modes:
            out = os.path.join(tmp, f"{mode}.json")
            env = dict(os.environ)
            if on_gpu:
                n = 1 if mode == "single" else args.gpus
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(n))
            cmd = worker_command(mode, args, out, args.gpus, on_gpu, device_map if mode == "model" else None)
            if progress:
                progress(f"{mode}: {' '.join(cmd)}")
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            if proc.returncode != 0 or not os.path.exists(out):
                tail = (proc.stderr or proc.stdout)[-3000:]
                raise RuntimeError(f"mode {mode}: worker exited {proc.returncode}\n{tail}")
            res = json.loads(Path(out).read_text())
            raw.append(res)
            results.append(summarize(res, paper_for(args, res)))
    by = {r["mode"]: r for r in results}
    speedup = {}
    if "single" in by and "data" in by:
        for k in ("loglikelihood_tok_s", "generation_tok_s"):
            if by["single"][k] and by["data"][k]:
                speedup[f"data_{k}_x"] = round(by["data"][k] / by["single"][k], 2)
    return {"bench": "multigpu", "checkpoint": args.checkpoint, "scheme": args.scheme, "gpus": args.gpus,
            "device": torch.cuda.get_device_name(0) if on_gpu else "cpu (dry check, not a measurement)",
            "torch": torch.__version__, "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "requests": args.requests, "ctx_len": args.ctx_len, "gen_requests": args.gen_requests,
            "gen_tokens": args.gen_tokens, "batch_size": args.batch_size, "backend": args.backend, "seed": args.seed, "repeats": args.repeats,
            "modes": results, "speedup": speedup,
            "targets": {"data_parallel_x": ">= 1.8", "peak_over_paper": "within 10% (0.9 .. 1.1)"},
            "raw": raw}


def main(args) -> int:
    try:
        result = run(args, progress=say_line)
    except (ValueError, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"moe-harness bench multigpu: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, default=str))
    report_dir(args, "bench-multigpu").write_json("bench_multigpu.json", result)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        sys.exit(worker_main(sys.argv[2:]))
    sys.exit("usage: python -m harness.commands.bench.multigpu worker ... (or: moe-harness bench multigpu)")
