"""The fused MoE GEMM's launch selector (harness/kernels/launch_config.py)
against its snapshot: every launch choice of the grid in launch_grid.py --
GEMM and dequant launches on CUDA, ROCm and the interpreter, every weights
kind and format, both precisions, every BLOCK_M class, N and K around every
threshold and tile, launch overrides, the K split, mode "auto", BLOCK_M of
the pair layout -- gives the constexprs, compile options and splits the
snapshot holds. A table row or rule changed on purpose is written into the
snapshot with `python -m suites.targets.launch_grid --write`."""
from __future__ import annotations

import dataclasses

import pytest

from harness.kernels import launch_config as lc
from suites.targets import launch_grid

REWRITE = "PYTHONPATH=$PWD python -m suites.targets.launch_grid --write"


def test_every_launch_choice_matches_the_snapshot():
    diff = launch_grid.differences(launch_grid.read(), launch_grid.evaluate())
    assert not diff, (f"{len(diff)} launch choices differ from suites/targets/fixtures/launches.json (a change on "
                      f"purpose: {REWRITE}, and review the diff):\n" + "\n".join(diff[:12]))


def test_a_changed_row_differs_from_the_snapshot(monkeypatch):
    """The comparison sees a one-field change of one row, and only the launches that take it (ROCm reads
    its own tables for every operand class: ROCM_BF16_CODE_CONFIGS is a copy of the H200 rows, made at
    import)."""
    monkeypatch.setitem(lc.GPU_CONFIGS, "large", dataclasses.replace(lc.GPU_CONFIGS["large"], num_stages=3))
    diff = launch_grid.differences(launch_grid.read(), launch_grid.evaluate())
    assert diff and all(d.startswith("gemm [") for d in diff), diff[:3]
    points = [d.split("[", 1)[1].split("]", 1)[0].split() for d in diff]  # vendor weights bf16 post bm n k override
    assert {(p[0], p[4]) for p in points} == {("cuda", "64"), ("cuda", "128")}


def test_maxnreg_is_a_cuda_compile_option():
    """A register cap is PTX's: passed on CUDA, dropped for ROCm and the
    interpreter, refused outside [MAXNREG_MIN, 255] or when not an int."""
    kw = dict(kind=1, fmt="mxfp4", block_m=16, n=64, k=4096)
    capped = lc.select_launch("gemm", "cuda", bf16=True, override=dict(maxnreg=128), **kw)
    assert capped.maxnreg == 128 and capped.meta()["maxnreg"] == 128
    assert "maxnreg" not in lc.select_launch("gemm", "cuda", bf16=True, **kw).meta()
    for vendor in ("rocm", "interpreter"):
        assert "maxnreg" not in lc.select_launch("gemm", vendor, override=dict(maxnreg=128), **kw).meta()
    for bad in (lc.MAXNREG_MIN - 1, 256, 128.0, "128", True):
        with pytest.raises(ValueError, match="maxnreg must be an int"):
            lc.select_launch("gemm", "cuda", override=dict(maxnreg=bad), **kw)


def test_an_override_names_launch_fields():
    kw = dict(kind=1, fmt="mxfp4", block_m=16, n=64, k=4096)
    with pytest.raises(ValueError, match="launch override sets BLOCK_Q"):
        lc.select_launch("gemm", "cuda", override={"BLOCK_Q": 8}, **kw)
    with pytest.raises(ValueError, match="no K split"):
        lc.select_launch("dequant", "cuda", kind=1, fmt="mxfp4", n=64, k=256, override={"SPLIT_K": 2})
    got = lc.select_launch("gemm", "cuda", override={"BLOCK_N": 32, "SPLIT_K": 2}, **kw)
    assert (got.BLOCK_N, got.SPLIT_K, got.BLOCK_K) == (32, 2, lc.GPU_CONFIGS["small"].BLOCK_K)


def test_set_row_reaches_every_later_launch():
    kw = dict(kind=1, fmt="mxfp4", bf16=True, block_m=128, n=4096, k=4096)
    row = dataclasses.replace(lc.GPU_CONFIGS["large"], BLOCK_N=64)
    old = lc.set_row("GPU_CONFIGS", "large", row)
    try:
        got = lc.select_launch("gemm", "cuda", **kw)
        assert (got.table, got.row, got.BLOCK_N) == ("GPU_CONFIGS", "large", 64)
    finally:
        assert lc.set_row("GPU_CONFIGS", "large", old) is row
    assert lc.select_launch("gemm", "cuda", **kw).BLOCK_N == old.BLOCK_N
    with pytest.raises(ValueError, match="no launch row"):
        lc.set_row("GPU_CONFIGS", "huge", row)


def test_scale_order_where_rows_are_not_16_bytes():
    """launch_config.scale_order: scale rows (K / block bytes) that are not a
    multiple of 16 are stored "n" (each block's N bytes contiguous) where N
    is and the K loop is long (K > SHORT_K_MAX); every other tensor keeps
    "k". The model families' expert GEMMs, as (N, K) of w13 and w2: only
    gpt-oss' K of 2880 (90 / 180 bytes a row) takes "n" (Qwen3's GEMM2, K
    768 with MXFP4 rows of 24 bytes, is a short loop)."""
    shapes = {"gpt-oss-120b": ((5760, 2880), (2880, 2880)), "mixtral": ((28672, 4096), (4096, 14336)),
              "qwen3-30b-a3b": ((1536, 2048), (2048, 768)), "deepseek-v3": ((4096, 7168), (7168, 2048))}
    for shape, gemms in shapes.items():
        for n, k in gemms:
            for block in (32, 16):
                want = "n" if shape == "gpt-oss-120b" else "k"
                assert lc.scale_order(n, k, block) == want, (shape, n, k, block)
    k = lc.SHORT_K_MAX + 32  # 33 blocks of 32
    assert lc.scale_order(64, k, 32) == "n" and lc.scale_order(64, k - 64, 32) == "k"  # a short K loop
    assert lc.scale_order(64, 16 * 32 * 3, 32) == "k"  # rows of 48 bytes
    assert lc.scale_order(40, k, 32) == "k"  # N not a multiple of 16 either: nothing aligns
    for n, k, block in ((0, 64, 32), (64, 48, 32), (64, -32, 32)):
        with pytest.raises(ValueError, match=f"N {n}, K {k} and block {block}"):
            lc.scale_order(n, k, block)
