"""`moe-harness bench kernels`: bandwidth of the Triton kernels against the
device's copy bandwidth, plain torch eager and torch.compile of the reference.

For each format and operation (qdq, quantize, dequantize) and size, GB/s is
(bytes read + bytes written) / time. Triton kernels and the copy are timed as
CUDA-graph replays of back-to-back calls (so host launch overhead is not
measured, and capture safety is exercised); the torch baselines are timed as
ordinary eager calls (the reference syncs with the host, so it cannot be
captured). Results go to stdout as JSON and to reports/<stamp>-bench-kernels/.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import statistics
import sys
import time

import torch

import harness.formats as hf

from harness.kernels import launch
from harness.util.report import atomic_write_json
from harness.commands.convention import report_dir

OPS = ("qdq", "quantize", "dequantize")
IMPLS = ("triton", "eager", "compile")
_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
ROW = 4096  # elements per row of the benchmark tensors (a multiple of every block)


def parse_size(text: str) -> int:
    text = text.strip().upper()
    n = int(text[:-1]) * _SUFFIX[text[-1]] if text[-1] in _SUFFIX else int(text)
    if n % ROW:
        raise argparse.ArgumentTypeError(f"size {text} is not a multiple of {ROW}")
    return n


def size_label(n: int) -> str:
    for s, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % f == 0:
            return f"{n // f}{s}"
    return str(n)


def _csv(kind, choices=None):
    def parse(text):
        items = [kind(t) for t in text.split(",") if t.strip()]
        if choices is not None:
            bad = [t for t in items if t not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {', '.join(choices)}")
        return items

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--formats", type=_csv(str, hf.FORMAT_NAMES), default=list(hf.FORMAT_NAMES))
    parser.add_argument("--ops", type=_csv(str, OPS), default=list(OPS))
    parser.add_argument("--sizes", type=_csv(parse_size), default=[parse_size(s) for s in "1M,4M,16M,64M,256M".split(",")],
                        help="element counts, e.g. 1M,64M (default 1M,4M,16M,64M,256M)")
    parser.add_argument("--baselines", type=_csv(str, ("eager", "compile")), default=["eager", "compile"],
                        help="torch baselines to time (default eager,compile)")
    parser.add_argument("--baseline-sizes", type=_csv(parse_size), default=[parse_size("64M")],
                        help="sizes at which the torch baselines run (compiling each costs seconds; default 64M)")
    parser.add_argument("--compile-ops", type=_csv(str, OPS), default=list(OPS),
                        help="ops for which torch.compile of the reference is timed (default all)")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--sweep", type=_csv(str), default=[],
                        help="extra Triton launch shapes to time, TILE_ELEMS:WARPS[:TILES_PER_PROGRAM], "
                             "e.g. 2048:4,8192:8,4096:4:2 (the third number: quantize only)")
    parser.add_argument("--sweep-sizes", type=_csv(parse_size), default=[],
                        help="sizes at which --sweep runs (default: the largest of --sizes)")
    parser.add_argument("--min-time", type=float, default=0.05, help="seconds per timed batch (default 0.05)")
    parser.add_argument("--out", default=None, help="also write the JSON to this path")


# ---------------------------------------------------------------- timing


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_plain(fn, device, min_time: float) -> float:
    """Seconds per call: median of 5 batches, each about min_time long."""
    fn()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    one = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, min(1000, int(min_time / one)))
    times = []
    for _ in range(5):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        _sync(device)
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def _time_graph(fn, device, min_time: float, bytes_per_call: int) -> float:
    """Seconds per call from CUDA-graph replays of `reps` captured calls."""
    if device.type != "cuda":
        return _time_plain(fn, device, min_time)
    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(s)
    _sync(device)
    # enough calls for ~min_time of work at ~4 TB/s, bounded for memory
    reps = int(max(2, min(200, min_time * 4e12 / max(bytes_per_call, 1))))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    _sync(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    del g
    return statistics.median(times)


# ---------------------------------------------------------------- workloads


def _pack(codes):
    """The reference's fp4 packing arithmetic (hf.pack_fp4 without its host-side
    range check, so torch.compile sees one graph)."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


class Workload:
    """Inputs and byte counts of one (format, op, size)."""

    def __init__(self, fmt: str, op: str, n: int, dtype, device):
        self.spec = spec = hf.get_format(fmt)
        self.fmt, self.op, self.n, self.dtype, self.device = fmt, op, n, dtype, device
        gen = torch.Generator(device=device).manual_seed(0)
        x = torch.randn(n // ROW, ROW, generator=gen, device=device, dtype=torch.float32).to(dtype)
        self.gs = None if spec.is_mx else hf.nvfp4_global_scale(x.float().abs().amax()).to(device)
        self.pack = spec.is_fp4
        esz = torch.tensor([], dtype=dtype).element_size()
        code_bytes = n // 2 if self.pack else n
        scale_bytes = n // spec.block_size
        if op == "dequantize":
            codes, scales = launch.quantize(x, self.gs_rows, fmt, "floor", "rne", self.pack)
            self.codes, self.scales = codes, scales
            self.bytes = code_bytes + scale_bytes + n * esz
            del x
        else:
            self.x = x
            self.bytes = n * esz + (n * esz if op == "qdq" else code_bytes + scale_bytes)

    @property
    def gs_rows(self):
        return None if self.gs is None else self.gs.reshape(1)

    def triton(self, tile_elems=None, num_warps=None, tiles_per_program=None):
        kw = dict(tile_elems=tile_elems, num_warps=num_warps)
        if self.op == "qdq":
            return lambda: launch.qdq(self.x, self.gs_rows, self.fmt, "floor", "rne", **kw)
        if self.op == "quantize":
            return lambda: launch.quantize(self.x, self.gs_rows, self.fmt, "floor", "rne", self.pack, **kw,
                                           tiles_per_program=tiles_per_program)
        return lambda: launch.dequantize(self.codes, self.scales, self.gs_rows, self.fmt, self.pack, self.dtype, **kw)

    def reference_fn(self):
        """(fn, args): the torch reference of this op, as a function of tensors."""
        fmt, dtype, pack = self.fmt, self.dtype, self.pack
        if self.op == "qdq":
            return (lambda x, gs: hf.qdq(x, fmt, global_scale=gs)), (self.x, self.gs)
        if self.op == "quantize":
            def quant(x, gs):
                q = hf.quantize(x, fmt, global_scale=gs)
                return (_pack(q.codes) if pack else q.codes), q.scales

            return quant, (self.x, self.gs)

        def dequant(codes, scales, gs):
            if pack:
                codes = hf.unpack_fp4(codes)
            q = hf.QuantizedTensor(codes=codes, scales=scales, global_scale=gs, fmt=fmt)
            return hf.dequantize(q, dtype)

        return dequant, (self.codes, self.scales, self.gs)


# ---------------------------------------------------------------- main


def _copy_gbps(n, dtype, device, min_time):
    src = torch.empty(n, dtype=dtype, device=device).normal_()
    dst = torch.empty_like(src)
    nbytes = 2 * src.numel() * src.element_size()
    t = _time_graph(lambda: dst.copy_(src), device, min_time, nbytes)
    return nbytes / t / 1e9


def _command_line() -> str:
    argv = sys.argv
    if argv and (argv[0].endswith("cli.py") or argv[0].endswith("moe-harness")):
        return "moe-harness " + " ".join(argv[1:])
    return "python -m harness.commands.bench.kernels " + " ".join(argv[1:])


def _device_info(device):
    info = {"device": str(device), "torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        info["triton"] = None
    if device.type == "cuda":
        info["name"] = torch.cuda.get_device_name(device)
    return info


def _measure(result, w, impl, sweep, device, args):
    t0 = time.perf_counter()
    try:
        if impl.startswith("triton"):
            tile, warps, tpp = ([int(v) for v in sweep.split(":")] + [None])[:3] if sweep else (None, None, None)
            secs = _time_graph(w.triton(tile, warps, tpp), device, args.min_time, w.bytes)
        else:
            fn, fargs = w.reference_fn()
            if impl == "compile":
                torch._dynamo.reset()
                fn = torch.compile(fn, dynamic=False)
            secs = _time_plain(lambda: fn(*fargs), device, args.min_time)
    except Exception as e:  # keep measuring the rest; the error is reported
        result["errors"].append({"format": w.fmt, "op": w.op, "size": size_label(w.n), "impl": impl,
                                 "error": f"{type(e).__name__}: {e}"[:500]})
        return
    gbps = w.bytes / secs / 1e9
    result["results"].append({
        "format": w.fmt, "op": w.op, "elements": w.n, "size": size_label(w.n), "impl": impl, "bytes": w.bytes,
        "time_us": round(secs * 1e6, 2), "gbps": round(gbps, 1), "wall_s": round(time.perf_counter() - t0, 2),
    })


def _plan(args):
    """(format, op, size, [(impl, sweep)]) in order: every Triton and eager
    measurement first, torch.compile (seconds of compiling each) last."""
    first, last = [], []
    for fmt in args.formats:
        for op in args.ops:
            for n in args.sizes:
                impls = [("triton", None)]
                if n in (args.sweep_sizes or [max(args.sizes)]):  # launch-shape sweep
                    impls += [(f"triton[{s}]", s) for s in args.sweep]
                if n in args.baseline_sizes and "eager" in args.baselines:
                    impls.append(("eager", None))
                first.append((fmt, op, n, impls))
                if n in args.baseline_sizes and "compile" in args.baselines and op in args.compile_ops:
                    last.append((fmt, op, n, [("compile", None)]))
    return first + last


def run(args, emit=None) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype)
    result = {
        "kind": "bench-kernels",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": _command_line(),
        **_device_info(device),
        "dtype": args.dtype,
        "copy_gbps": {},
        "results": [],
        "errors": [],
    }
    emit = emit or (lambda r: None)

    def copy_round():
        for n in args.sizes:
            gbps = round(_copy_gbps(n, dtype, device, args.min_time), 1)
            label = size_label(n)
            result["copy_gbps"][label] = max(gbps, result["copy_gbps"].get(label, 0.0))
        # The reference copy bandwidth: the best copy measured at any size of
        # at least 16M elements (smaller ones sit in L2), so % of copy is conservative.
        big = [v for k, v in result["copy_gbps"].items() if parse_size(k) >= (16 << 20)] or list(result["copy_gbps"].values())
        result["copy_ref_gbps"] = max(big)
        emit(result)

    copy_round()
    for fmt, op, n, impls in _plan(args):
        try:
            w = Workload(fmt, op, n, dtype, device)
        except Exception as e:
            result["errors"].append({"format": fmt, "op": op, "size": size_label(n), "impl": "setup",
                                     "error": f"{type(e).__name__}: {e}"[:500]})
            continue
        for impl, sweep in impls:
            _measure(result, w, impl, sweep, device, args)
            result["summary"] = summarize(result)
            emit(result)
        del w
        if device.type == "cuda":
            torch.cuda.empty_cache()
    copy_round()  # again at the end: the clocks have settled
    result["summary"] = summarize(result)
    emit(result)
    return result


def summarize(result: dict) -> list:
    """One row per (format, op, size) with Triton GB/s, % of copy and the
    ratio to each baseline timed at that size."""
    rows = {}
    copy = result.get("copy_ref_gbps") or 1.0
    for r in result["results"]:
        key = (r["format"], r["op"], r["size"])
        rows.setdefault(key, {"format": r["format"], "op": r["op"], "size": r["size"]})[r["impl"]] = r["gbps"]
        if r["impl"] == "triton":
            rows[key]["triton_pct_copy"] = round(100 * r["gbps"] / copy, 1)
    out = []
    for row in rows.values():
        for b in ("eager", "compile"):
            if b in row and "triton" in row and row[b]:
                row[f"x_{b}"] = round(row["triton"] / row[b], 1)
        out.append(row)
    return out


def main(args) -> int:
    report = report_dir(args, "bench-kernels")

    def emit(result):
        if report is not None:
            report.write_json("bench_kernels.json", result)
        if args.out:
            atomic_write_json(args.out, result)

    result = run(args, emit)
    result["report"] = str(report.path)
    print(json.dumps(result, indent=1))
    return 1 if result["errors"] else 0


if __name__ == "__main__":  # python -m harness.commands.bench.kernels
    p = argparse.ArgumentParser(prog="python -m harness.commands.bench.kernels")
    add_arguments(p)
    sys.exit(main(p.parse_args()))
