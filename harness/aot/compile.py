"""`moe-harness targets`: compile every Triton kernel of the project, in every
GPU launch configuration its host code can pick, ahead of time and without a
GPU, for gfx942 and gfx950 (ROCm, wave 64) and sm_90 and sm_100 (CUDA).

Per kernel x configuration x target it records ok / fail / overflow,
registers, spills, shared memory (LDS on AMD) against the target's limit and
the compile time; prints a table, writes JSON, and exits 1 on any failure or
overflow. The kernels and configurations come from harness.aot.registry
(launch_aot.py, fused_aot.py), built from the launchers' own tables.

Every launch with integer arguments is compiled twice, as Triton's launcher
specialises them (INT_SPECS): "any", nothing known about them, and "div16",
every one a multiple of 16 (what any model whose sizes are multiples of 16
runs: the loads vectorise, the pipeline deepens, and shared memory / LDS can
grow 2.5-5x; on gfx942 that is where the bf16 float-weight GEMM tiles of the
H200 table overflowed 64 KiB while the unspecialised compile fitted).

Results are cached (one small JSON per compile) under
$MOE_HARNESS_CACHE_DIR, else $XDG_CACHE_HOME/moe-harness, else
~/.cache/moe-harness, keyed by the kernel's source (Triton's dependency hash of
the jit function and the text of its file), the Triton version, the target and
the launch configuration: an unchanged tree recompiles nothing. Failures are
never cached. Triton's own binary cache goes to a temporary folder, deleted
after the run.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.aot import registry
from harness.util import interrupt
from harness.aot.inventory import jit_function_sources, kernel_files

# Bumped when what a cached result holds, or how it is measured, changes.
CACHE_VERSION = 2

# How integer arguments are specialised when compiled (Triton's launcher marks
# an int divisible by 16, and compiles for it): "any" assumes nothing,
# "div16" every integer argument a multiple of 16.
INT_SPECS = ("any", "div16")


@dataclass(frozen=True)
class Target:
    name: str
    backend: str  # "hip" | "cuda"
    arch: object  # "gfx942" | 90
    warp_size: int
    shared_limit: int  # bytes of shared memory / LDS one program (block) may use
    limit_source: str
    # fp8 MLIR types the target has no native support for (a kernel on its path must not use them)
    foreign_fp8: tuple


TARGETS = {
    t.name: t for t in (
        Target("gfx942", "hip", "gfx942", 64, 64 * 1024,
               "AMD CDNA3 (MI300) ISA: 64 KiB LDS per compute unit; Triton's HIP launcher checks "
               "hipDeviceAttributeMaxSharedMemoryPerBlock (65536 on MI300X)",
               ("f8E4M3FN", "f8E5M2")),
        Target("gfx950", "hip", "gfx950", 64, 160 * 1024,
               "AMD CDNA4 (MI350) ISA: 160 KiB LDS per compute unit",
               ("f8E4M3FNUZ", "f8E5M2FNUZ")),
        Target("sm_90", "cuda", 90, 32, 232448,
               "CUDA C++ Programming Guide, compute capability 9.0: 228 KB shared memory per SM, "
               "227 KB (232448 B) per block; Triton's CUDA launcher checks "
               "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
               ("f8E4M3FNUZ", "f8E5M2FNUZ")),
        Target("sm_100", "cuda", 100, 32, 232448,
               "CUDA C++ Programming Guide, compute capability 10.0: 228 KB shared memory per SM, "
               "227 KB (232448 B) per block",
               ("f8E4M3FNUZ", "f8E5M2FNUZ")),
    )
}


# ---------------------------------------------------------------- triton API


def _triton_api():
    """(triton, ASTSource, GPUTarget), or a RuntimeError naming what to install."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        raise RuntimeError(f"moe-harness targets needs triton >= 3.3 with ASTSource and GPUTarget "
                           f"(pip install 'triton>=3.3'): {exc}") from None
    import inspect

    if "constexprs" not in inspect.signature(ASTSource.__init__).parameters:
        raise RuntimeError(f"triton {triton.__version__}: ASTSource(fn, signature, constexprs) is missing; "
                           "moe-harness targets needs triton >= 3.3 (pip install 'triton>=3.3')")
    from triton import backends

    for b in ("amd", "nvidia"):
        if b not in backends.backends:
            raise RuntimeError(f"triton {triton.__version__} has no {b} backend; install the official triton wheel, "
                               "which ships both (pip install --force-reinstall triton)")
    return triton, ASTSource, GPUTarget


def _is_int(arg_type: str) -> bool:
    return re.fullmatch(r"[iu](8|16|32|64)", arg_type) is not None


def _arg_attrs(target, signature: dict, ints: str = "any") -> dict:
    """Pointers 16-byte aligned, as torch allocations are, and with ints
    "div16" every integer argument a multiple of 16: the divisibility Triton's
    launcher specialises on."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    if ints not in INT_SPECS:
        raise ValueError(f"integer specialisation {ints!r}; expected one of {', '.join(INT_SPECS)}")
    backend = make_backend(GPUTarget(target.backend, target.arch, target.warp_size))
    parse = getattr(backend, "parse_attr", None)
    if parse is None:
        raise RuntimeError("this triton's backends have no parse_attr; moe-harness targets needs triton >= 3.3")
    return {(i,): parse("D") for i, t in enumerate(signature.values())
            if t.startswith("*") or (ints == "div16" and _is_int(t))}


# ---------------------------------------------------------------- metrics


def _amd_metrics(asm: str) -> dict:
    """From the HSA code object metadata in the AMDGCN assembly."""
    def field(name):
        m = re.search(rf"^\s*\.{name}:\s+(\d+)", asm, re.MULTILINE)
        return int(m.group(1)) if m else None

    vgpr = field("vgpr_count")
    if vgpr is None:
        raise RuntimeError("no .vgpr_count in the AMDGCN metadata (has this triton's output format changed?)")
    scratch = field("private_segment_fixed_size") or 0
    return dict(n_regs=vgpr, n_spills=scratch // 4, sgprs=field("sgpr_count"), agprs=field("agpr_count"),
                vgpr_spills=field("vgpr_spill_count"), sgpr_spills=field("sgpr_spill_count"), scratch_bytes=scratch,
                lds_bytes=field("group_segment_fixed_size"))


def _cuobjdump() -> str:
    try:
        from triton import knobs

        path = knobs.nvidia.cuobjdump.path
    except Exception:
        import triton.backends.nvidia as nv

        path = str(Path(nv.__file__).parent / "bin" / "cuobjdump")
    if not path or not os.path.exists(path):
        raise RuntimeError("cuobjdump not found (the triton wheel ships it in triton/backends/nvidia/bin; "
                           "reinstall triton or set TRITON_CUOBJDUMP_PATH)")
    return path


def _cuda_metrics(cubin: bytes, name: str) -> dict:
    """Registers and local memory as the driver reports them (Triton's n_regs,
    n_spills = local bytes / 4), read from the cubin with cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([_cuobjdump(), "--dump-resource-usage", f.name], capture_output=True, text=True,
                             check=True).stdout
    m = re.search(rf"Function {re.escape(name)}:\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    if not m:
        raise RuntimeError(f"cuobjdump printed no resource usage for {name}:\n{out}")
    reg, stack, shared, local = map(int, m.groups())
    return dict(n_regs=reg, n_spills=local // 4, stack_bytes=stack, local_bytes=local, static_shared=shared)


_PTX_WGMMA = re.compile(r"\bwgmma\.mma_async\b")
_PTX_COMMIT = re.compile(r"\bwgmma\.commit_group\b")
_SASS_LINE = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_GCN_LINE = re.compile(r"\s+([a-z][a-z0-9_]*)(?:\s|$)")


def isa_mix(ck, target: Target) -> dict:
    """The compiled kernel's machine instructions by opcode (`--isa`): SASS
    from cuobjdump on CUDA (opcodes with their modifiers, predicates
    dropped), the AMDGCN text Triton keeps on ROCm (mnemonics between the
    kernel's label and its end label). Whole kernel, not per loop. CUDA
    rows also count the PTX's wgmma.mma_async and wgmma.commit_group
    (`ptx_wgmma`): how many wgmmas Triton issues per group before ptxas."""
    counts: dict = {}
    if target.backend == "hip":
        name = ck.metadata.name
        lines = ck.asm["amdgcn"].splitlines()
        try:
            start = next(i for i, line in enumerate(lines) if line.split(";")[0].strip() == f"{name}:")
            end = next(i for i in range(start, len(lines)) if lines[i].startswith(".Lfunc_end"))
        except StopIteration:
            raise RuntimeError(f"no body of {name} found in its AMDGCN text") from None
        ops = [m.group(1) for line in lines[start + 1:end] if (m := _GCN_LINE.match(line))]
    else:
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(ck.asm["cubin"])
            f.flush()
            sass = subprocess.run([_cuobjdump(), "-sass", f.name], capture_output=True, text=True, check=True).stdout
        ops = [m.group(1) for line in sass.splitlines() if (m := _SASS_LINE.match(line))]
    if not ops:
        raise RuntimeError(f"no instructions read from the {target.name} code of {ck.metadata.name}")
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    mix = dict(instructions=len(ops), opcodes=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))))
    if target.backend != "hip":  # how Triton groups its wgmmas before ptxas (one commit per wgmma: nothing to pipeline)
        ptx = ck.asm.get("ptx", "")
        mix["ptx_wgmma"] = dict(mma_async=len(_PTX_WGMMA.findall(ptx)), commit_group=len(_PTX_COMMIT.findall(ptx)))
    return mix


def isa_groups(opcodes: dict) -> dict:
    """Opcode counts grouped for reading: SASS opcodes without their
    modifiers (ptxas' register move IMAD.MOV kept apart from IMAD), AMDGCN
    mnemonics as they are."""
    out: dict = {}
    for op, n in opcodes.items():
        key = "IMAD.MOV" if op.startswith("IMAD.MOV") else op.split(".")[0]
        out[key] = out.get(key, 0) + n
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


_FP8 = re.compile(r"f8E\d\w*")  # MLIR fp8 types, e.g. tensor<256xf8E4M3FN>
_ASM = re.compile(r"elementwise_inline_asm")


def compile_variant(fn, variant: dict, target: Target, isa: bool = False) -> dict:
    """Compile one launch for one target; a result row (never raises for a
    kernel that does not compile: that is a "fail" row). `isa`: the row also
    holds its instruction mix (isa_mix)."""
    triton, ASTSource, GPUTarget = _triton_api()
    row = dict(target=target.name, shared_limit=target.shared_limit)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*TRITON_DEFAULT_FP_FUSION.*")
            src = ASTSource(fn, variant["signature"], variant["constexprs"],
                            _arg_attrs(target, variant["signature"], variant.get("ints", "any")))
            ck = triton.compile(src, target=GPUTarget(target.backend, target.arch, target.warp_size),
                                options=dict(variant["options"]))
    except Exception as exc:  # the compiler's error is the result
        row.update(status="fail", compile_s=round(time.perf_counter() - t0, 3),
                   error=f"{type(exc).__name__}: {str(exc).strip()[:3000]}")
        return row
    row["compile_s"] = round(time.perf_counter() - t0, 3)
    md = ck.metadata
    metrics = _amd_metrics(ck.asm["amdgcn"]) if target.backend == "hip" else _cuda_metrics(ck.asm["cubin"], md.name)
    shared = max(int(md.shared), int(metrics.get("lds_bytes") or 0))
    ttir = ck.asm.get("ttir", "")
    fp8 = sorted(set(_FP8.findall(ttir)))
    row.update(n_regs=metrics.pop("n_regs"), n_spills=metrics.pop("n_spills"), shared=shared, details=metrics,
               fp8_types=fp8, inline_asm=len(_ASM.findall(ttir)))
    if isa:
        row["isa"] = isa_mix(ck, target)
    return judge(row, target)


def judge(row: dict, target: Target) -> dict:
    """The verdict on a compiled launch under the target's current rules (also
    applied to cached rows, so a changed limit needs no recompile)."""
    row = {k: v for k, v in row.items() if k not in ("status", "error")}
    row["shared_limit"] = target.shared_limit
    foreign = [t for t in row["fp8_types"] if t in target.foreign_fp8]
    if foreign:
        row.update(status="fail", error=f"uses {', '.join(foreign)}, which {target.name} has no native support for")
    elif row["shared"] > target.shared_limit:
        row.update(status="overflow",
                   error=f"shared memory {row['shared']} B exceeds {target.name}'s {target.shared_limit} B")
    else:
        row["status"] = "ok"
    return row


# ---------------------------------------------------------------- work list and cache


def _plain(v):
    """JSON-able constexpr values (triton dtypes and the like by their repr)."""
    return v if isinstance(v, (bool, int, float, str, type(None))) else repr(v)


def _variant_dict(v) -> dict:
    return dict(config=v.config, signature=dict(v.signature), constexprs={k: _plain(x) for k, x in v.constexprs.items()},
                options=dict(v.options))


def work_list(kernel_patterns=None, config_patterns=None, backend="cuda") -> list[dict]:
    """[{kernel, config, aliases, signature, constexprs, options, source}]: the
    registry's launches on `backend` ("cuda" | "hip"), duplicates (identical
    compiles) folded into one with aliases."""
    reg = registry.kernels()
    names = [n for n in reg if not kernel_patterns or any(fnmatch.fnmatchcase(n, p) for p in kernel_patterns)]
    if kernel_patterns and not names:
        raise ValueError(f"--kernels {','.join(kernel_patterns)} matches no kernel; registered: {', '.join(reg)}")
    out, seen = [], {}
    for name in names:
        k = reg[name]
        fn = k.jit()
        path = k.source_file()
        source = dict(file=path.as_posix(), text_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                      triton_cache_key=fn.cache_key)
        for v in k.variants(backend):
            if config_patterns and not any(fnmatch.fnmatchcase(v.config, p) for p in config_patterns):
                continue
            d = _variant_dict(v)
            specs = INT_SPECS if any(_is_int(t) for t in d["signature"].values()) else INT_SPECS[:1]
            for ints in specs:
                key = (name, ints, json.dumps([d["signature"], d["constexprs"], d["options"]], sort_keys=True))
                if key in seen:
                    seen[key]["aliases"].append(v.config)
                    continue
                item = dict(kernel=name, aliases=[], source=source, ints=ints, **d)
                seen[key] = item
                out.append(item)
    if config_patterns and not out:
        raise ValueError(f"--configs {','.join(config_patterns)} matches no launch configuration")
    return out


COVERAGES = ("all", "pairs")


def _axis_values(item: dict) -> list[tuple]:
    return ([("sig", k, v) for k, v in item["signature"].items()] + [("const", k, repr(v)) for k, v in item["constexprs"].items()]
            + [("opt", k, repr(v)) for k, v in item["options"].items()] + [("ints", item["ints"])])


def select_pairs(items: list[dict]) -> list[dict]:
    """A subset of the work list in which every pair of (argument type,
    constexpr or option value) that occurs together in some launch of a kernel
    still occurs together: every format with every dtype, scale mode, tail,
    tile... Greedy set cover (most new pairs first, ties in registry order),
    so deterministic; the result keeps registry order.

    A pair is ordered as its two values come in the launch's axes. Each
    kernel's launches become rows of a boolean matrix over its pairs; a
    pick subtracts the pairs it covers from every row's count, so each
    (launch, pair) is counted once, not once a pick (thousands of GEMM
    launches of ~6000 pairs each: seconds, where set intersections a pick
    took minutes)."""
    by_kernel: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_kernel.setdefault(item["kernel"], []).append(i)
    keep = set()
    for idxs in by_kernel.values():
        vocab: dict = {}
        rows = [np.array([vocab.setdefault(v, len(vocab)) for v in _axis_values(items[i])], dtype=np.int64)
                for i in idxs]
        n_values = len(vocab)
        pair_ids = []
        for r in rows:
            j, k = np.triu_indices(len(r), 1)
            pair_ids.append(r[j] * n_values + r[k])
        seen = np.zeros(n_values * n_values, dtype=bool)
        for p in pair_ids:
            seen[p] = True
        column = np.cumsum(seen) - 1  # the pairs that occur, numbered
        cover = np.zeros((len(rows), int(seen.sum())), dtype=bool)
        for n, p in enumerate(pair_ids):
            cover[n, column[p]] = True
        gains = cover.sum(axis=1)
        todo = np.ones(cover.shape[1], dtype=bool)
        while todo.any():
            best = int(np.argmax(gains))  # the first of the largest: registry order breaks ties
            new = cover[best] & todo
            todo &= ~new
            gains -= cover[:, new].sum(axis=1)
            keep.add(idxs[best])
    return [item for i, item in enumerate(items) if i in keep]


def default_cache_dir() -> Path:
    if os.environ.get("MOE_HARNESS_CACHE_DIR"):
        return Path(os.environ["MOE_HARNESS_CACHE_DIR"]) / "targets"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "moe-harness" / "targets"


def cache_key(item: dict, target: Target, triton_version: str, isa: bool = False) -> str:
    key = dict(v=CACHE_VERSION, triton=triton_version, target=target.name, kernel=item["kernel"],
               text=item["source"]["text_sha256"], jit=item["source"]["triton_cache_key"],
               signature=item["signature"], constexprs=item["constexprs"], options=item["options"],
               ints=item["ints"])
    if isa:  # rows with their instruction mix are cached apart (the default key is unchanged)
        key["isa"] = 2  # 2: the mix holds ptx_wgmma
    blob = json.dumps(key, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _cache_get(cache: Path | None, key: str):
    if cache is None:
        return None
    try:
        return json.loads((cache / key[:2] / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None


def _cache_put(cache: Path | None, key: str, row: dict) -> None:
    if cache is None or "n_regs" not in row:  # only compiled launches; compile errors are redone
        return
    path = cache / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(row))
    os.replace(tmp, path)


# ---------------------------------------------------------------- running


def _jit_for(kernel: str):
    return registry.kernels()[kernel].jit()


def _compile_task(task):
    item, target_name, isa = task
    row = compile_variant(_jit_for(item["kernel"]), item, TARGETS[target_name], isa)
    return row


def _init_worker(triton_cache: str):
    os.environ["TRITON_CACHE_DIR"] = triton_cache


def _stop_pool(pool, grace_s: float = 5.0) -> None:
    """Pool.terminate (it stops replacing workers first, then SIGTERM to each
    and joins them); what is alive after `grace_s` gets SIGKILL. Finished rows
    are already in the cache."""
    procs = list(getattr(pool, "_pool", None) or [])
    stopper = threading.Thread(target=pool.terminate, daemon=True)
    stopper.start()
    stopper.join(grace_s)
    for p in procs:
        if p.is_alive():
            p.kill()
    stopper.join()


def run(target_names, kernel_patterns=None, config_patterns=None, jobs=1, cache_dir=None, progress=None,
        coverage="all", isa=False) -> dict:
    """Compile (or read from the cache) every work item for every target; the JSON document.
    coverage "pairs" compiles select_pairs() of the launches instead of all; `isa`: every row
    with its instruction mix (isa_mix)."""
    triton, _, _ = _triton_api()
    unknown = [t for t in target_names if t not in TARGETS]
    if unknown:
        raise ValueError(f"unknown target {', '.join(unknown)}; expected some of {', '.join(TARGETS)}")
    if coverage not in COVERAGES:
        raise ValueError(f"unknown coverage {coverage!r}; expected one of {', '.join(COVERAGES)}")
    lists, n_launches = {}, {}
    for t in target_names:
        b = TARGETS[t].backend
        if b not in lists:
            items = work_list(kernel_patterns, config_patterns, b)
            n_launches[b] = len(items)
            lists[b] = select_pairs(items) if coverage == "pairs" else items
    cache = Path(cache_dir) if cache_dir else None
    rows, todo = [], []
    for t in target_names:
        for item in lists[TARGETS[t].backend]:
            key = cache_key(item, TARGETS[t], triton.__version__, isa)
            hit = _cache_get(cache, key)
            base = dict(kernel=item["kernel"], config=item["config"], ints=item["ints"], aliases=item["aliases"])
            if hit is not None:
                rows.append(dict(base, **judge(hit, TARGETS[t]), cached=True))
            else:
                rows.append(None)
                todo.append((len(rows) - 1, key, base, item, t))
    t0 = time.perf_counter()
    triton_cache = tempfile.mkdtemp(prefix="moe-harness-triton-")
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = triton_cache
    try:
        if jobs > 1 and len(todo) > 1:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            pool = None
            try:
                # the workers start now: not cut in half while their setup is written; a signal that came
                # meanwhile is raised as the block ends, inside this try, so the pool is stopped below
                with interrupt.deferred():
                    pool = ctx.Pool(jobs, initializer=_init_worker, initargs=(triton_cache,))
                results = pool.imap(_compile_task, [(item, t, isa) for _, _, _, item, t in todo], chunksize=4)
                for n, ((i, key, base, _, _), row) in enumerate(zip(todo, results)):
                    _cache_put(cache, key, row)
                    rows[i] = dict(base, **row, cached=False)
                    if progress:
                        progress(n + 1, len(todo))
                pool.close()
            except BaseException:  # interrupted (or a worker failed): no compile outlives the run
                if pool is not None:
                    _stop_pool(pool)
                raise
            finally:
                if pool is not None:
                    pool.terminate()
                    pool.join()
        else:
            for n, (i, key, base, item, t) in enumerate(todo):
                row = compile_variant(_jit_for(item["kernel"]), item, TARGETS[t], isa)
                _cache_put(cache, key, row)
                rows[i] = dict(base, **row, cached=False)
                if progress:
                    progress(n + 1, len(todo))
    finally:
        shutil.rmtree(triton_cache, ignore_errors=True)
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old
    return dict(
        meta=dict(triton_version=triton.__version__, coverage=coverage, isa=isa, launches=n_launches,
                  selected={b: len(v) for b, v in lists.items()},
                  targets={t: dict(shared_limit=TARGETS[t].shared_limit,
                                                                      limit_source=TARGETS[t].limit_source)
                                                              for t in target_names},
                  compiled=len(todo), cached=len(rows) - len(todo), cache_dir=str(cache) if cache else None,
                  wall_s=round(time.perf_counter() - t0, 2), jobs=jobs,
                  pointer_alignment="16 B (Triton's divisibility specialisation)",
                  int_specialisations=dict(any="integer arguments unspecialised",
                                           div16="every integer argument a multiple of 16")),
        summary=summarize(rows, target_names),
        source_scan=source_scan(),
        results=rows,
    )


def summarize(rows, target_names) -> list[dict]:
    out = []
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    for k in kernels:
        for t in target_names:
            rs = [r for r in rows if r["kernel"] == k and r["target"] == t]
            good = [r for r in rs if r["status"] != "fail"]
            out.append(dict(
                kernel=k, target=t, configs=len(rs),
                ok=sum(r["status"] == "ok" for r in rs), fail=sum(r["status"] == "fail" for r in rs),
                overflow=sum(r["status"] == "overflow" for r in rs),
                max_regs=max((r["n_regs"] for r in good), default=None),
                max_spills=max((r["n_spills"] for r in good), default=None),
                max_shared=max((r["shared"] for r in good), default=None),
                shared_limit=TARGETS[t].shared_limit,
                compile_s=round(sum(r.get("compile_s", 0.0) for r in rs), 1)))
    return out


def source_scan(root=None) -> dict:
    """Per kernel file: inline assembly and fp8 dtypes written in its jit functions."""
    root = Path(root) if root else Path(__file__).resolve().parents[2]
    out = {}
    for rel in kernel_files(root):
        srcs = jit_function_sources((root / rel).read_text(encoding="utf-8"))
        asm = sorted(n for n, s in srcs.items() if re.search(r"inline_asm|\basm\b", s))
        fp8 = sorted({m for s in srcs.values() for m in re.findall(r"\btl\.float8\w*|\bfloat8\w*|\bfp8e\w+", s)})
        out[rel] = dict(jit_functions=len(srcs), inline_asm=asm, fp8_dtypes=fp8)
    return out


# ---------------------------------------------------------------- output


def _kib(n):
    return "-" if n is None else f"{n / 1024:.1f}"


def table(doc: dict, verbose: bool = False) -> str:
    lines = [f"{'kernel':<24} {'target':<7} {'configs':>7} {'ok':>5} {'fail':>5} {'ovfl':>5} {'max regs':>8} "
             f"{'spills':>6} {'max smem KiB':>12} {'limit':>6} {'compile s':>9}"]
    for s in doc["summary"]:
        lines.append(f"{s['kernel']:<24} {s['target']:<7} {s['configs']:>7} {s['ok']:>5} {s['fail']:>5} "
                     f"{s['overflow']:>5} {s['max_regs'] if s['max_regs'] is not None else '-':>8} "
                     f"{s['max_spills'] if s['max_spills'] is not None else '-':>6} {_kib(s['max_shared']):>12} "
                     f"{_kib(s['shared_limit']):>6} {s['compile_s']:>9}")
    shown = doc["results"] if verbose else [r for r in doc["results"] if r["status"] != "ok"]
    if shown:
        lines.append("")
        lines.append(f"{'status':<8} {'target':<7} {'kernel':<24} {'config':<44} {'ints':<5} {'regs':>5} "
                     f"{'spills':>6} {'smem B':>7} {'s':>6}")
        for r in shown:
            lines.append(f"{r['status']:<8} {r['target']:<7} {r['kernel']:<24} {r['config']:<44} {r['ints']:<5} "
                         f"{r.get('n_regs', '-'):>5} {r.get('n_spills', '-'):>6} {r.get('shared', '-'):>7} "
                         f"{r.get('compile_s', 0):>6}")
            if r.get("error"):
                lines.append("    " + r["error"].splitlines()[0][:300])
    m = doc["meta"]
    if m.get("isa"):
        lines.append("")
        lines.append("instruction mix (whole kernel; SASS opcodes without modifiers, AMDGCN mnemonics):")
        for r in doc["results"]:
            if "isa" in r:
                top = ", ".join(f"{op} {n}" for op, n in list(isa_groups(r["isa"]["opcodes"]).items())[:10])
                lines.append(f"{r['target']:<7} {r['kernel']} {r['config']} {r['ints']}: "
                             f"{r['isa']['instructions']} instructions; {top}")
    lines.append("")
    for b, n in m["launches"].items():
        lines.append(f"coverage {m['coverage']}: {m['selected'][b]} of {n} distinct launches on {b} (launch "
                     f"configuration x integer specialisation: {', '.join(INT_SPECS)})")
    lines.append(f"triton {m['triton_version']}: {m['compiled']} compiled, {m['cached']} from the cache "
                 f"({m['cache_dir'] or 'cache off'}), {m['wall_s']} s with {m['jobs']} job(s)")
    scan = doc["source_scan"]
    flagged = {f: s for f, s in scan.items() if s["inline_asm"] or s["fp8_dtypes"]}
    lines.append(f"source scan of {len(scan)} kernel files: "
                 + ("no inline assembly, no fp8 dtypes" if not flagged else json.dumps(flagged)))
    return "\n".join(lines)


def failed(doc: dict) -> list[dict]:
    return [r for r in doc["results"] if r["status"] != "ok"]
