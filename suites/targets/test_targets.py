"""`moe-harness targets`: every Triton kernel compiles ahead of time for gfx942
and sm_90 (make test's gate; the Buildkite cpu-targets step runs all launch
configurations for all four targets), the registry covers every kernel in the
source, and the faults the command exists for turn it red."""
from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import harness
from harness import cli
from harness.aot import fused_launches
from harness.aot import inventory
from harness.aot import registry
from harness.aot import compile as targets
from harness.aot.registry import Variant
from harness.kernels import launch_config as lc

ROOT = Path(harness.__file__).resolve().parents[1]
GATE_TARGETS = ("gfx942", "sm_90")


def _rows_text(rows):
    return "\n".join(f"{r['status']} {r['target']} {r['kernel']} {r['config']}: {r.get('error', '')[:400]}"
                     for r in rows)


# ---------------------------------------------------------------- the gate


@pytest.mark.parametrize("target", GATE_TARGETS)
@pytest.mark.parametrize("kernel", sorted(registry.kernels()))
def test_kernel_compiles_for_target(kernel, target):
    """Every pair of launch choices of the kernel (coverage "pairs"), cached
    under ~/.cache/moe-harness (MOE_HARNESS_CACHE_DIR): no failure, shared
    memory within the target's limit."""
    doc = targets.run([target], [kernel], jobs=1, cache_dir=targets.default_cache_dir(), coverage="pairs")
    assert doc["results"], "no launch configuration compiled"
    bad = targets.failed(doc)
    assert not bad, _rows_text(bad)


# ---------------------------------------------------------------- coverage of the source


def test_every_kernel_in_the_package_is_registered():
    in_source = {(path, name) for path, names in inventory.kernel_files(ROOT).items() for name in names}
    registered = {(k.source_file().relative_to(ROOT).as_posix(), name) for name, k in registry.kernels().items()}
    assert in_source, "the inventory found no kernels"
    assert in_source == registered, (f"in the source, not registered: {sorted(in_source - registered)}; "
                                     f"registered, not in the source: {sorted(registered - in_source)}")


def test_inventory_tells_kernels_from_helpers():
    src = '''
import triton
from triton import jit

@triton.jit
def _helper(x):
    return x

@jit
def a_kernel(p):
    _helper(p)

@triton.jit(do_not_specialize=["n"])
def b_kernel(p, n):
    pass

def plain(p):
    _helper(p)

def c_kernel(p):
    pass

C = triton.jit(c_kernel)
'''
    assert inventory.kernels_in_source(src) == ["a_kernel", "b_kernel", "c_kernel"]
    assert sorted(inventory.jit_function_sources(src)) == ["_helper", "a_kernel", "b_kernel", "c_kernel"]


@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_every_kernel_has_launches_and_pairs_keep_every_value(backend):
    items = targets.work_list(backend=backend)
    chosen = targets.select_pairs(items)
    assert {i["kernel"] for i in items} == set(registry.kernels()) == {i["kernel"] for i in chosen}
    for k in registry.kernels():
        full = {v for i in items if i["kernel"] == k for v in targets._axis_values(i)}
        kept = {v for i in chosen if i["kernel"] == k for v in targets._axis_values(i)}
        assert full == kept, k
    assert len(chosen) < len(items)


def _greedy_pairs_by_sets(items):
    """The pairwise cover written the plain way (sets of ordered pairs, one
    intersection a candidate a pick): what select_pairs must choose."""
    keep = set()
    for kernel in dict.fromkeys(i["kernel"] for i in items):
        cands = []
        for n, item in enumerate(items):
            if item["kernel"] == kernel:
                axes = targets._axis_values(item)
                cands.append((n, {(a, b) for j, a in enumerate(axes) for b in axes[j + 1:]}))
        todo = set().union(*(p for _, p in cands))
        while todo:
            n, pairs = max(cands, key=lambda c: (len(c[1] & todo), -c[0]))
            keep.add(n)
            todo -= pairs
    return [item for n, item in enumerate(items) if n in keep]


def _synthetic_items(seed, n=120):
    """Launches of two made-up kernels: random values on seven axes (an
    argument type, four constexprs, an option, the integer specialisation),
    some launches without a constexpr, and constexprs in two insertion orders
    (so the same two values form the pair (a, b) in one launch and (b, a) in
    another)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        const = {f"C{a}": rng.randrange(3) for a in range(4) if rng.random() < 0.85}
        if rng.random() < 0.5:
            const = dict(reversed(list(const.items())))
        out.append(dict(kernel=f"k{i % 2}", signature={"x": rng.choice(["*fp32", "*bf16"])}, constexprs=const,
                        options={"num_warps": rng.choice([4, 8])}, ints=rng.choice(["any", "div16"])))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_pairwise_cover_picks_what_the_plain_greedy_picks(seed):
    items = _synthetic_items(seed)
    got = targets.select_pairs(items)
    assert got == _greedy_pairs_by_sets(items)
    for k in ("k0", "k1"):  # and it is a cover: every pair of a kernel's launches is kept
        def pairs(rows):
            return {(a, b) for i in rows if i["kernel"] == k
                    for j, a in enumerate(targets._axis_values(i)) for b in targets._axis_values(i)[j + 1:]}
        assert pairs(got) == pairs(items)


def test_pairwise_cover_of_the_registry_matches_the_plain_greedy():
    """Every registered kernel but the GEMM (whose thousands of launches the
    plain greedy takes minutes over; the other kernels launch alike on hip)."""
    items = [i for i in targets.work_list(backend="cuda") if i["kernel"] != "_moe_gemm_kernel"]
    assert targets.select_pairs(items) == _greedy_pairs_by_sets(items)


def test_launch_tables_reach_the_work_list(monkeypatch):
    """The GEMM's tuned table is read when the work list is built, not copied."""
    monkeypatch.setitem(lc.GPU_CONFIGS, "large", dataclasses.replace(lc.GPU_CONFIGS["large"], BLOCK_N=96))
    monkeypatch.setitem(lc.GPU_CONFIGS, "large_n", dataclasses.replace(lc.GPU_CONFIGS["large_n"], BLOCK_N=80))
    monkeypatch.setitem(lc.GPU_CONFIGS, "large_long_k", dataclasses.replace(lc.GPU_CONFIGS["large_long_k"], BLOCK_N=112))
    got = {i["constexprs"]["BLOCK_N"] for i in targets.work_list(["_moe_gemm_kernel"], ["fused.*.bm128.*"])}
    assert got == {96, 80, 112}


def test_a_rows_register_cap_reaches_ptxas(monkeypatch):
    """LaunchRow.maxnreg goes from the table through the registry's compile
    options to ptxas: the capped launch holds at most that many registers a
    thread, fewer than it takes uncapped (the cap derived from that count,
    so the check does not pin one Triton's register allocation)."""
    cfg = "fused.mxfp4.bf16.bm16.even.shortk"

    def regs():
        doc = targets.run(["sm_90"], ["_moe_gemm_kernel"], [cfg], jobs=1, cache_dir=targets.default_cache_dir())
        (row,) = [r for r in doc["results"] if r["ints"] == "div16"]
        assert row["status"] == "ok", _rows_text([row])
        return row["n_regs"]

    free = regs()
    cap = max(lc.MAXNREG_MIN, (free - 16) // 8 * 8)
    assert cap < free, free
    monkeypatch.setitem(lc.GPU_CONFIGS, "small_short_k", dataclasses.replace(lc.GPU_CONFIGS["small_short_k"],
                                                                             maxnreg=cap))
    assert regs() <= cap


def test_rocm_takes_the_lds_safe_tiles():
    """gfx942's 64 KiB of LDS: float32 operands on ROCm use ROCM_F32_CONFIGS
    (the H200 tiles need 80-192 KiB there), bf16 operands with 2-byte float
    weights ROCM_BF16_FLOAT_CONFIGS (72-96 KiB); code-decoding bf16 launches
    keep the GPU_CONFIGS tiles (ROCM_BF16_CODE_CONFIGS: those rows with
    BF16_TRUNC), and CUDA GPU_CONFIGS."""
    def tile(bm, launch="gemm", kind=1, fmt="mxfp4", rocm=False, **kw):
        c = lc.select_launch(launch, "rocm" if rocm else "cuda", kind=kind, fmt=fmt, block_m=bm, n=0, k=0, **kw)
        return c.BLOCK_N, c.BLOCK_K, c.num_warps, c.num_stages

    def table(t, row):
        return t[row].BLOCK_N, t[row].BLOCK_K, t[row].num_warps, t[row].num_stages

    rocm, rocm_bf16, cuda = lc.ROCM_F32_CONFIGS, lc.ROCM_BF16_FLOAT_CONFIGS, lc.GPU_CONFIGS
    for bm, row in ((16, "small"), (128, "large")):
        assert tile(bm, bf16=False, rocm=True) == table(rocm, row)
        assert tile(bm, bf16=False, rocm=False) == table(cuda, row)
        assert tile(bm, bf16=True, rocm=True) == table(cuda, row)
        assert tile(bm, bf16=True, rocm=True, kind=0, fmt=None, w_bytes=4) == table(rocm, row)
        assert tile(bm, bf16=True, rocm=True, kind=0, fmt=None, w_bytes=2) == table(rocm_bf16, row)
        assert tile(bm, bf16=True, rocm=False, kind=0, fmt=None, w_bytes=2) == table(cuda, row)
    assert tile(128, "scratch_gemm", bf16=False, rocm=True, kind=0, fmt=None, w_bytes=4) == table(rocm, "large_float")
    assert tile(128, "scratch_gemm", bf16=True, rocm=True, kind=0, fmt=None, w_bytes=2) == \
        table(rocm_bf16, "large_float")


def test_the_dispatch_says_which_table_runs(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    assert lc.launch_tables() == {"bf16": "GPU_CONFIGS", "bf16, float weights": "GPU_CONFIGS",
                                  "float32": "GPU_CONFIGS"}
    monkeypatch.setattr(torch.version, "hip", "7.1.0")
    assert lc.launch_tables() == {"bf16": "ROCM_BF16_CODE_CONFIGS", "bf16, float weights": "ROCM_BF16_FLOAT_CONFIGS",
                                  "float32": "ROCM_F32_CONFIGS"}


def _isa_row(target, config, ints="div16"):
    doc = targets.run([target], ["_moe_gemm_kernel"], [config], jobs=1, cache_dir=targets.default_cache_dir(),
                      isa=True)
    (row,) = [r for r in doc["results"] if r["ints"] == ints]
    assert row["status"] == "ok", _rows_text([row])
    mix = row["isa"]
    assert sum(mix["opcodes"].values()) == mix["instructions"] > 0
    return mix, targets.isa_groups(mix["opcodes"])


def test_isa_mix_counts_the_machine_code():
    """`targets --isa`: SASS and AMDGCN opcodes of a compiled launch, the
    MMAs among them (the decode GEMMs at BLOCK_M 16 on sm_90: wgmma, HGMMA,
    for MXFP4's transposed product on "mma" words, whose weights are its
    register operand; mma.sync, HMMA, for NVFP4's; MFMA on gfx942)."""
    _, sm90 = _isa_row("sm_90", "fused.mxfp4.bf16.bm16.even")
    assert sm90.get("HGMMA", 0) > 0 and "HMMA" not in sm90, sm90
    _, sm90 = _isa_row("sm_90", "fused.nvfp4.bf16.bm16.even")
    assert sm90.get("HMMA", 0) > 0, sm90
    _, gfx = _isa_row("gfx942", "fused.mxfp4.bf16.bm16.even")
    assert any(op.startswith("v_mfma_f32") and op.endswith("bf16") for op in gfx), gfx


def test_the_transposed_prefill_launch_keeps_its_wgmmas_asynchronous():
    """"large_n" (MXFP4 at BLOCK_M 64 and up, scale bytes in order "n") pays
    only while ptxas keeps its wgmmas asynchronous, the next K step's decode
    beside the MMA. Where a path that skips the K loop zeroes the
    accumulator, ptxas serializes every wgmma of the kernel (C7515; seen on
    the router weights' epilogue, gpt-oss' GEMM2): the kernel tells the
    compiler that every program has a K step (tl.assume). The sm_90 SASS of
    that launch then issues its wgmmas in groups: fewer WARPGROUP.ARRIVE
    than HGMMA (serialized, one each). Checked where Triton itself groups
    them (several wgmma.mma_async per commit in the PTX, as triton 3.9
    does); triton 3.6 commits each wgmma alone (one ARRIVE each
    whatever ptxas does), so there the SASS says nothing and the test skips."""
    mix, _ = _isa_row("sm_90", "fused.mxfp4.n.bf16.bm128.even.rs")
    ptx = mix["ptx_wgmma"]
    if ptx["mma_async"] <= ptx["commit_group"]:
        pytest.skip(f"this Triton commits each wgmma alone ({ptx}): ptxas gets no group to keep")
    ops = mix["opcodes"]
    hgmma = sum(v for op, v in ops.items() if op.startswith("HGMMA"))
    assert 0 < ops.get("WARPGROUP.ARRIVE", 0) < hgmma, ops


def test_rocm_bf16_code_rows_spare_the_software_rounding(monkeypatch):
    """Why ROCm's bf16 code launches take BF16_TRUNC: gfx942 has no packed
    bf16 multiply, so bf16 products compile to float32 multiplies each
    followed by a software round to nearest even (its NaN test
    v_cmp_o_f32 among them); truncating the exact float32 products drops
    that sequence and most of the kernel's instructions."""
    trunc, trunc_ops = _isa_row("gfx942", "fused.mxfp4.bf16.bm16.even")
    monkeypatch.setitem(lc.VENDOR_TABLES["rocm"], "bf16", ("GPU_CONFIGS",))  # bf16 multiplies, as on CUDA
    mul, mul_ops = _isa_row("gfx942", "fused.mxfp4.bf16.bm16.even")
    rne = [op for op in mul_ops if op.startswith("v_cmp_o_f32")]
    assert rne and not any(op in trunc_ops for op in rne), (rne, trunc_ops)
    assert trunc["instructions"] < mul["instructions"], (trunc["instructions"], mul["instructions"])


def test_launches_with_integer_arguments_compile_in_both_specialisations():
    """Triton's launcher specialises integers divisible by 16; every launch
    with integer arguments is in the work list unspecialised and as
    multiples of 16, cached apart; launches without them once."""
    items = targets.work_list(["_moe_gemm_kernel", "silu_and_mul_kernel"], ["fused.mxfp4.bf16.bm16.even", "f32"])
    by_config = {}
    for i in items:
        by_config.setdefault(i["config"], []).append(i["ints"])
    assert by_config == {"fused.mxfp4.bf16.bm16.even": ["any", "div16"], "f32": ["any", "div16"]}
    t = targets.TARGETS["gfx942"]
    assert len({targets.cache_key(i, t, "3.9.0") for i in items}) == len(items)
    sig = items[0]["signature"]
    any_attrs = targets._arg_attrs(t, sig, "any")
    div_attrs = targets._arg_attrs(t, sig, "div16")
    n_ptr = sum(v.startswith("*") for v in sig.values())
    n_int = sum(v in ("i32", "i64") for v in sig.values())
    assert (len(any_attrs), len(div_attrs)) == (n_ptr, n_ptr + n_int) and n_int > 0
    with pytest.raises(ValueError, match="integer specialisation 'div8'"):
        targets._arg_attrs(t, sig, "div8")


def test_code_launches_compile_in_both_scale_orders():
    """The scale bytes' two orders (launch_config.scale_order) as Triton's
    launcher binds their unit stride: every launch on element codes has the
    block stride bound to 1 ("k"), and each but the short-K row's also runs
    as ".n" with the row stride bound to 1 instead; on both backends, for
    every weight format. The order also picks the row at BLOCK_M 64 and up
    (launch_config.row_names): CUDA's MXFP4 launches there take the
    transposed product on "large", or on "large_n" in order "n", and on
    "large_long_k" over a long K in either order."""
    from harness.formats import FORMAT_NAMES

    for backend in ("cuda", "hip"):
        items = targets.work_list(["_moe_gemm_kernel"], ["fused.*", "predequant.dequant.*"], backend)
        code = [i for i in items if not i["config"].startswith("fused.float.")]
        n_order = [i for i in code if ".n." in i["config"]]
        k_order = [i for i in code if ".n." not in i["config"]]
        assert n_order and all(i["constexprs"].get("stride_mn") == 1 and "stride_mb" not in i["constexprs"]
                               for i in n_order)
        assert all(i["constexprs"].get("stride_mb") == 1 and "stride_mn" not in i["constexprs"] for i in k_order)
        assert not [i for i in n_order if ".shortk" in i["config"]]
        for fmt in FORMAT_NAMES:  # the same launches in both orders (".n" after the format and ".plain")
            ks = {i["config"] for i in k_order if f".{fmt}." in i["config"] and ".shortk" not in i["config"]}
            ns = {i["config"].replace(".n.", ".", 1) for i in n_order if f".{fmt}." in i["config"]}
            assert ks and ks == ns, (backend, fmt, sorted(ks ^ ns)[:6])
        # at BLOCK_M 128 CUDA's bf16 MXFP4 launches are the transposed product, on "large" in order "k" and on
        # "large_n" in order "n", on "large_long_k" in both; no others are, on either backend
        big = [i for i in code if ".bm128." in i["config"] and i["config"].startswith("fused.")]
        swapped = {i["config"] for i in big if i["constexprs"].get("SWAP_MN")}
        if backend == "cuda":
            mx = [i for i in big if i["config"].startswith("fused.mxfp4.") and ".bf16." in i["config"]]
            assert mx and swapped == {i["config"] for i in mx}, sorted(swapped ^ {i["config"] for i in mx})[:6]
            tiles = {(".n." in i["config"], i["constexprs"]["BLOCK_N"], i["constexprs"]["BLOCK_K"]) for i in mx}
            rows = lc.GPU_CONFIGS
            assert tiles == {(False, rows["large"].BLOCK_N, rows["large"].BLOCK_K),
                             (False, rows["large_long_k"].BLOCK_N, rows["large_long_k"].BLOCK_K),
                             (True, rows["large_long_k"].BLOCK_N, rows["large_long_k"].BLOCK_K),
                             (True, rows["large_n"].BLOCK_N, rows["large_n"].BLOCK_K)}, tiles
        else:
            assert not swapped, sorted(swapped)[:6]


def test_overread_weights_launches_are_registered():
    """The launches on e2m1 words read past a ragged long K
    (launch_config.read_k: "mma" words under plain scales, so CUDA's MX
    launches only) are in the work list as ".kover": K_OVERREAD, neither
    EVEN_NK nor K_TAIL, in both scale orders, both precisions and every
    BLOCK_M class, each the selector's launch for such weights; weights
    whose scales are not plain, and ROCm, read no row past K and have none."""
    from harness.kernels.pair_layout import BLOCK_MS

    items = targets.work_list(["_moe_gemm_kernel"], ["fused.*"], "cuda")
    kover = [i for i in items if ".kover" in i["config"]]
    assert kover and all(i["constexprs"].get("K_OVERREAD") is True and not i["constexprs"]["EVEN_NK"]
                        and not i["constexprs"]["K_TAIL"] for i in kover)
    assert {tuple(i["config"].split(".")[1:3]) for i in kover} == {("mxfp4", "plain")}
    names = {i["config"] for i in kover}
    for prec in ("ieee", "bf16"):
        for bm in BLOCK_MS:
            for order in ("", ".n"):
                assert f"fused.mxfp4.plain{order}.{prec}.bm{bm}.kover" in names, (prec, bm, order)
    want = lc.select_launch("gemm", "cuda", kind=1, fmt="mxfp4", bf16=True, block_m=128, n=5760, k=2880,
                            k_read=3072, word_order="mma", scale_order="n", plain_scales=True)
    got = {i["config"]: i for i in kover}["fused.mxfp4.plain.n.bf16.bm128.kover"]["constexprs"]
    assert {k: got[k] for k in ("BLOCK_N", "BLOCK_K", "K_OVERREAD", "SWAP_MN", "PLAIN_SCALES")} == {
        k: want.meta()[k] for k in ("BLOCK_N", "BLOCK_K", "K_OVERREAD", "SWAP_MN", "PLAIN_SCALES")}
    assert not [i for i in targets.work_list(["_moe_gemm_kernel"], ["fused.*"], "hip") if ".kover" in i["config"]]


# ---------------------------------------------------------------- faults shown red


def _cli(tmp_path, *args):
    out = tmp_path / "targets.json"
    rc = cli.main(["targets", "--reports", str(tmp_path / "reports"), "--no-cache", "--jobs", "1", "--json", str(out), *args])
    return rc, json.loads(out.read_text())


def test_a_launch_over_64k_lds_fails_gfx942(tmp_path, monkeypatch):
    sel = ["--targets", "gfx942", "--kernels", "_moe_gemm_kernel", "--configs", "fused.mxfp4.ieee.bm16.even"]
    rc, doc = _cli(tmp_path, *sel)
    assert rc == 0 and [r["status"] for r in doc["results"]] == ["ok", "ok"], _rows_text(doc["results"])
    # the fault: ROCm given the H200 tile for float32 operands (64 x 256, 3 stages)
    monkeypatch.setitem(lc.ROCM_F32_CONFIGS, "small", lc.GPU_CONFIGS["small"])
    rc, doc = _cli(tmp_path, *sel)
    assert rc == 1
    for row in doc["results"]:
        assert row["status"] == "overflow" and row["shared"] > 64 * 1024, row
        assert "exceeds gfx942's 65536 B" in row["error"]


def test_an_overflow_only_aligned_sizes_reach_fails_gfx942(tmp_path, monkeypatch):
    """The bug the div16 compile exists for: with the H200 tile (64 x 256, 3
    stages), the bf16 GEMM on predequant's scratch fitted gfx942's LDS when
    compiled with nothing known about its integers (32 KiB) and overflowed it
    as every model runs it (sizes multiples of 16: 80 KiB)."""
    sel = ["--targets", "gfx942", "--kernels", "_moe_gemm_kernel", "--configs", "predequant.gemm.bf16.bm16.even"]
    rc, doc = _cli(tmp_path, *sel)
    assert rc == 0, _rows_text(doc["results"])
    assert {r["ints"]: r["status"] for r in doc["results"]} == {"any": "ok", "div16": "ok"}
    # the fault: ROCm's bf16 float-weight launches given the H200 tile again
    monkeypatch.setitem(lc.ROCM_BF16_FLOAT_CONFIGS, "small", lc.GPU_CONFIGS["small"])
    rc, doc = _cli(tmp_path, *sel)
    rows = {r["ints"]: r for r in doc["results"]}
    assert rc == 1
    assert rows["any"]["status"] == "ok", rows["any"]
    assert rows["div16"]["status"] == "overflow" and rows["div16"]["shared"] > 64 * 1024, rows["div16"]


@triton.jit
def ptx_probe_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise("cvt.rni.s32.f32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y)


@triton.jit
def ocp_fp8_probe_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(tl.float8e4nv).to(tl.float32))


@pytest.fixture
def probes():
    registry.kernels()  # the real ones first
    for name, fn in (("ptx_probe_kernel", ptx_probe_kernel), ("ocp_fp8_probe_kernel", ocp_fp8_probe_kernel)):
        registry.register(name, lambda fn=fn: fn, lambda backend, fn=fn: [Variant(
            "f32", {"x_ptr": "*fp32", "y_ptr": "*i32" if fn is ptx_probe_kernel else "*fp32", "BLOCK": "constexpr"},
            {"BLOCK": 256}, {"num_warps": 4})])
    yield
    registry.unregister("ptx_probe_kernel")
    registry.unregister("ocp_fp8_probe_kernel")


def test_ptx_inline_asm_fails_on_gfx942_only(tmp_path, probes):
    rc, doc = _cli(tmp_path, "--targets", "gfx942,sm_90", "--kernels", "ptx_probe_kernel")
    by_target = {r["target"]: r for r in doc["results"]}
    assert rc == 1
    assert by_target["sm_90"]["status"] == "ok", by_target["sm_90"]
    assert by_target["sm_90"]["inline_asm"] == 1
    assert by_target["gfx942"]["status"] == "fail" and by_target["gfx942"]["error"], by_target["gfx942"]


def test_ocp_fp8_type_fails_on_gfx942_only(tmp_path, probes):
    rc, doc = _cli(tmp_path, "--targets", "gfx942,sm_90", "--kernels", "ocp_fp8_probe_kernel")
    by_target = {r["target"]: r for r in doc["results"]}
    assert rc == 1
    assert by_target["sm_90"]["status"] == "ok", by_target["sm_90"]
    assert by_target["gfx942"]["status"] == "fail"
    assert "f8E4M3FN, which gfx942 has no native support for" in by_target["gfx942"]["error"]


# The one kernel with inline assembly: the fused GEMM's folded multiply (FOLD_BIAS), a PTX branch that only CUDA
# launches take.
INLINE_ASM = {"harness/kernels/fused_gemm_src.py": ["_moe_gemm_kernel"]}


def test_shipped_kernels_keep_inline_asm_off_rocm():
    """No fp8 dtype in any kernel; inline assembly only where INLINE_ASM
    says, behind a constexpr no ROCm launch sets: of every launch the
    registry compiles, FOLD_BIAS (the PTX branch) is on some CUDA launches
    and on no hip one (and each ROCm launch's TTIR is compiled for gfx942,
    where PTX fails: the gate above)."""
    scan = targets.source_scan(ROOT)
    assert scan and not any(s["fp8_dtypes"] for s in scan.values()), scan
    assert {f: s["inline_asm"] for f, s in scan.items() if s["inline_asm"]} == INLINE_ASM
    folded = {b: sum(1 for v in fused_launches.gemm_variants(b) if v.constexprs.get("FOLD_BIAS"))
              for b in ("cuda", "hip")}
    assert folded["cuda"] > 0 and folded["hip"] == 0, folded


def test_source_scan_flags_inline_asm_and_fp8(tmp_path):
    f = tmp_path / "harness" / "k.py"
    f.parent.mkdir()
    f.write_text(
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n"
        "    y = tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], dtype=tl.int32, is_pure=True, pack=1)\n"
        "    return y.to(tl.float8e4nv)\n")
    scan = targets.source_scan(tmp_path)
    assert scan == {"harness/k.py": {"jit_functions": 1, "inline_asm": ["k"], "fp8_dtypes": ["tl.float8e4nv"]}}


# ---------------------------------------------------------------- cache and command line


def test_cache_hits_when_unchanged_and_misses_when_the_launch_changes(tmp_path, monkeypatch):
    from harness.kernels import fused_act

    run = lambda: targets.run(["gfx942"], ["silu_and_mul_kernel"], jobs=1, cache_dir=tmp_path)  # noqa: E731
    first, second = run(), run()
    # two launch configurations (float32 and bf16 out), each compiled per integer specialisation (any, div16)
    assert (first["meta"]["compiled"], first["meta"]["cached"]) == (4, 0)
    assert (second["meta"]["compiled"], second["meta"]["cached"]) == (0, 4)
    assert [r["n_regs"] for r in second["results"]] == [r["n_regs"] for r in first["results"]]
    monkeypatch.setattr(fused_act, "SILU_META", dict(fused_act.SILU_META, num_warps=8))
    assert run()["meta"]["compiled"] == 4
    # a changed limit re-judges cached rows without compiling
    monkeypatch.setitem(targets.TARGETS, "gfx942", dataclasses.replace(targets.TARGETS["gfx942"], shared_limit=-1))
    again = run()
    assert again["meta"]["compiled"] == 0 and {r["status"] for r in again["results"]} == {"overflow"}
    item = targets.work_list(["silu_and_mul_kernel"], backend="hip")[0]
    keys = {targets.cache_key(item, targets.TARGETS[t], v) for t in ("gfx942", "sm_90") for v in ("3.6.0", "3.9.0")}
    assert len(keys) == 4


def test_parallel_jobs_give_the_same_rows(tmp_path):
    sel = (["gfx942"], ["silu_and_mul_kernel", "scale_to_bf16_kernel"])
    one = targets.run(*sel, jobs=1, cache_dir=None)
    two = targets.run(*sel, jobs=2, cache_dir=None)
    strip = lambda d: [{k: v for k, v in r.items() if k != "compile_s"} for r in d["results"]]  # noqa: E731
    assert strip(one) == strip(two)


@pytest.mark.parametrize("args, message", [
    (["--targets", "gfx90a"], "unknown target gfx90a"),
    (["--kernels", "nope*"], "--kernels nope* matches no kernel"),
    (["--kernels", "qdq_kernel", "--configs", "nope"], "--configs nope matches no launch configuration"),
])
def test_bad_arguments_are_one_line_errors(args, message, capsys, tmp_path):
    assert cli.main(["targets", "--reports", str(tmp_path), "--no-cache", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
