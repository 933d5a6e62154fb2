"""The grid of launch choices the fused MoE GEMM's host code can make, and its
snapshot `fixtures/launches.json` (test_launch_selection.py holds the
selector to it).

Each point names one choice by its inputs -- vendor, launch, weights, operand
precision, BLOCK_M, N, K, a launch override, pairs / experts / SM count for
the split -- and its value is what the host code launches: the kernel's
constexprs and compile options in order, the K split, the mode, BLOCK_M of
the pair layout, the table each operand class reads. The grid crosses every
axis the choice reads with values on both sides of every threshold (BLOCK_M
64, K <= SHORT_K_MAX, tails of every table tile, the split-K limits, mode
"auto"'s rows per expert).

A change to a launch table or a selection rule turns the test red until the
snapshot is written again, on purpose:

    PYTHONPATH=$PWD python -m suites.targets.launch_grid --write

and the diff of fixtures/launches.json is the reviewed record of which
launches changed.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.formats import get_format
from harness.kernels.launch_config import (VENDOR_TABLES, launch_tables, operands, resolve_mode, scale_order,
                                           select_launch, read_k, word_order)
from harness.kernels.pair_layout import block_m_for

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "launches.json"

VENDORS = ("cuda", "rocm", "interpreter")
FORMATS = ("nvfp4", "mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2")
BLOCK_MS = (16, 32, 64, 128)
# (N, K): N and K unknown (0, as the compile check asks), K on either side of
# SHORT_K_MAX (1024), tails on either side of every table tile (BLOCK_N
# 16..256, BLOCK_K 32..512), and a K whose tail steps BLOCK_K down (2880),
# read past it on "mma" words under plain scales (read_k: K_OVERREAD where N has no tail)
NK = ((0, 0), (0, 1024), (96, 32), (256, 768), (96, 1040), (256, 1056), (96, 14336), (96, 2880), (256, 2880))
# the weights of a GEMM launch: element codes decoded in the K loop (":plain":
# FusedWeights.plain_scales, which acts on MX rows only), float weights as
# given (2- and 4-byte), mode "predequant"'s scratch
WEIGHTS = ("codes:mxfp4", "codes:nvfp4", "codes:mxfp4:plain", "codes:nvfp4:plain", "float:2", "float:4", "scratch")
OVERRIDES = (
    None,
    {"EVEN_NK": True},
    {"EVEN_NK": False},
    {"BF16_DECODE": True},
    {"BF16_DECODE": False},
    {"FAST_DECODE": False},
    {"BYTE_DECODE": False, "BF16_DECODE": False},
    {"BLOCK_N": 32, "BLOCK_K": 64},
    {"BLOCK_N": 32, "BLOCK_K": 64, "EVEN_NK": False},
    {"num_warps": 8, "num_stages": 2},
    {"SPLIT_K": 2},
    {"BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "FAST_DECODE": True, "MULT_BCAST": True,
     "PACK_JOIN": True, "BYTE_DECODE": True, "BF16_DECODE": False, "SPLIT_K": 1},
)
MODES = ("auto", "fused", "predequant")


def gemm_points():
    """(vendor, weights, bf16, has_post, block_m, n, k, override) of GEMM launches."""
    pts = []
    for vendor in VENDORS:
        for weights in WEIGHTS:
            for bf16 in (False, True):
                post = bf16 and weights in ("codes:nvfp4", "codes:nvfp4:plain", "scratch")
                for bm in BLOCK_MS:
                    for n, k in NK:
                        pts.append((vendor, weights, bf16, post, bm, n, k, None))
                    if bm in (16, 128):
                        for ov in OVERRIDES[1:]:
                            pts.append((vendor, weights, bf16, post, bm, 96, 1056, ov))
    for vendor in VENDORS:  # every format, with and without the post factor
        for fmt in FORMATS:
            for bf16 in (False, True):
                for post in (False, True):
                    pts.append((vendor, f"codes:{fmt}", bf16, post, 16, 96, 1056, None))
    return pts


def dequant_points():
    """(vendor, weights kind, fmt, bf16_out, n, k, override) of the dequant-only launch."""
    pts = []
    for vendor in VENDORS:
        for bf16_out in (False, True):
            for kind, fmt in ((1, "mxfp4"), (1, "mxfp4:plain"), (0, None)):
                for n, k in NK:
                    pts.append((vendor, kind, fmt, bf16_out, n, k, None))
            for fmt in FORMATS:
                if fmt != "mxfp4":  # on the N, K axis above
                    pts.append((vendor, 1, fmt, bf16_out, 96, 1040, None))
                if fmt in ("mxfp4", "nvfp4"):
                    for ov in OVERRIDES[1:]:
                        if "SPLIT_K" not in ov:
                            pts.append((vendor, 1, fmt, bf16_out, 96, 1056, ov))
    return pts


def split_points():
    """(vendor, pairs, experts, n, k, sm_count, SPLIT_K override) of the K split of a
    GEMM1/GEMM2 launch (codes, bf16, BLOCK_M from the pairs per expert)."""
    pts = []
    shapes = ((256, 768), (768, 2048), (4096, 14336), (28672, 4096), (14336, 4096), (4096, 256), (64, 32))
    for vendor in ("cuda", "interpreter"):
        for pairs in (1, 2, 4, 8, 16, 32, 64, 128, 512, 2048, 8192):
            for experts in (8, 128):
                for n, k in shapes:
                    for sm in (132, 304):
                        pts.append((vendor, pairs, experts, n, k, sm, None))
        for n, k in shapes[:3]:
            for splits in (1, 2, 3, 4, 8, 0, True, "2"):
                pts.append((vendor, 2, 8, n, k, 132, splits))
    return pts


def mode_points():
    """(vendor, weights kind, pairs, experts, mode) of mode "auto"'s choice."""
    return [(vendor, kind, pairs, experts, mode)
            for vendor in ("cuda", "interpreter") for kind in (0, 1) for experts in (1, 8, 128)
            for pairs in sorted({0, 1, 256 * experts, 512 * experts - 1, 512 * experts, 512 * experts + 1,
                                 4096 * experts})
            for mode in MODES]


def block_m_points():
    """(pair rows, experts) around every BLOCK_M class boundary."""
    rows = set()
    for experts in (1, 2, 8, 128):
        for per in (0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000):
            for d in (-1, 0, 1):
                rows.add((max(0, per * experts + d), experts))
    return sorted(rows)


def key(*parts) -> str:
    """A point's name in the snapshot: its parts by spaces, an override as
    name=value pairs, none as "-"."""
    def part(p):
        if p is None:
            return "-"
        if isinstance(p, dict):
            return ",".join(f"{k}={v!r}" for k, v in p.items())
        if not isinstance(p, str):
            return str(p)
        plain = p and " " not in p and not p[0].isdigit() and p not in ("-", "True", "False")
        return p if plain else repr(p)
    return " ".join(part(p) for p in parts)


def points() -> dict:
    """{kind of choice: [(key, point)]}, every point of the grid."""
    grid = dict(gemm=gemm_points(), dequant=dequant_points(), split=split_points(), mode=mode_points(),
                block_m=block_m_points(), tables=[("cuda",), ("rocm",)])
    out = {kind: [(key(*p), p) for p in pts] for kind, pts in grid.items()}
    for kind, pts in out.items():
        if len({k for k, _ in pts}) != len(pts):
            raise ValueError(f"launch grid: two {kind} points share a key")
    return out


def write(values: dict) -> None:
    """values: {kind: {key: value}}, a value's "meta" (the launch's constexprs
    and compile options, a dict in launch order) stored once and referred to
    by index."""
    metas: list = []
    index: dict = {}
    out = {}
    for kind, by_key in values.items():
        out[kind] = {}
        for k, v in by_key.items():
            if kind in ("gemm", "dequant") and "meta" in v:
                blob = json.dumps(v["meta"])
                if blob not in index:
                    index[blob] = len(metas)
                    metas.append(v["meta"])
                v = {"meta": index[blob]}
            out[kind][k] = v
    # one line per meta and per point, so that a diff shows which launches changed
    lines = ['{"metas": [', ",\n".join(json.dumps(m, separators=(",", ":")) for m in metas), "]"]
    for kind, by_key in out.items():
        lines += [f', "{kind}": {{', ",\n".join(f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in by_key.items()), "}"]
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text("\n".join(lines) + "}\n")


def read() -> dict:
    """{kind: {key: value}} with each "meta" read back into its dict (in launch order)."""
    doc = json.loads(FIXTURE.read_text())
    metas = doc.pop("metas")
    for kind in ("gemm", "dequant"):
        for k, v in doc[kind].items():
            if "meta" in v:
                doc[kind][k] = {"meta": metas[v["meta"]]}
    return doc


# ---------------------------------------------------------------- the selector's values


def _error(exc: Exception) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}"}


def _launch_dict(cfg, override) -> dict:
    """The launch's constexprs and compile options in launch order; an
    override's SPLIT_K stays among them before EVEN_NK, where the snapshot
    was taken (the launcher took it out before the launch)."""
    items = list(cfg.meta().items())
    if override and "SPLIT_K" in override:
        at = [k for k, _ in items].index("EVEN_NK")
        items.insert(at, ("SPLIT_K", cfg.SPLIT_K))
    return dict(items)


def _scale_order(fmt, n, k) -> str:
    """The scale bytes' order FusedWeights.from_quantized gives weights of this
    N and K (launch_config.scale_order); "k" where N or K is unknown (0)."""
    if fmt is None or n <= 0 or k <= 0 or k % get_format(fmt).block_size:
        return "k"
    return scale_order(n, k, get_format(fmt).block_size)


def gemm_value(vendor, weights, bf16, post, bm, n, k, override):
    if weights == "scratch":
        launch, kind, fmt, w_bytes = "scratch_gemm", 0, None, 2 if bf16 else 4
    elif weights.startswith("float:"):
        launch, kind, fmt, w_bytes = "gemm", 0, None, int(weights.split(":")[1])
    else:
        launch, kind, fmt, w_bytes = "gemm", 1, weights.split(":")[1], 1
    try:
        order = word_order(vendor, fmt, k)  # the K from_quantized lets a GEMM read (read_k, plain scales only)
        cfg = select_launch(launch, vendor, kind=kind, fmt=fmt, bf16=bf16, has_post=post, block_m=bm, n=n, k=k,
                            w_bytes=w_bytes, override=override, word_order=order,
                            plain_scales=weights.endswith(":plain"), scale_order=_scale_order(fmt, n, k),
                            k_read=read_k(order, k) if weights.endswith(":plain") else k)
    except ValueError as exc:
        return _error(exc)
    return {"meta": _launch_dict(cfg, override)}


def dequant_value(vendor, kind, fmt, bf16_out, n, k, override):
    fmt, _, plain = (fmt or "").partition(":")  # "mxfp4:plain": FusedWeights.plain_scales
    fmt = fmt or None
    try:
        cfg = select_launch("dequant", vendor, kind=kind, fmt=fmt, bf16=bf16_out, n=n, k=k, override=override,
                            word_order=word_order(vendor, fmt if kind == 1 else None, k), plain_scales=plain == "plain")
    except ValueError as exc:
        return _error(exc)
    return {"meta": _launch_dict(cfg, override)}


def split_value(vendor, pairs, experts, n, k, sms, splits):
    bm = block_m_for(pairs, experts)
    try:
        cfg = select_launch("gemm", vendor, kind=1, fmt="mxfp4", bf16=True, block_m=bm, n=n, k=k, pairs=pairs,
                            experts=experts, sm_count=None if vendor == "interpreter" else sms,
                            bias=True, row_scale=True, override=None if splits is None else {"SPLIT_K": splits},
                            word_order=word_order(vendor, "mxfp4", k), plain_scales=True,
                            k_read=read_k(word_order(vendor, "mxfp4", k), k))
    except ValueError as exc:
        return _error(exc)
    # the epilogue (bias, router weights) in the kernel only without a split
    return {"block_m": bm, "splits": cfg.SPLIT_K, "split_blocks": cfg.SPLIT_BLOCKS,
            "epilogue": [cfg.HAS_BIAS, cfg.ROW_SCALE]}


def mode_value(vendor, kind, pairs, experts, mode):
    return {"mode": resolve_mode(mode, vendor, kind, pairs, experts)}


def block_m_value(rows, experts):
    return {"block_m": block_m_for(rows, experts)}


def tables_value(vendor):
    """The table of each operand class, and the ROCm table that replaces
    GPU_CONFIGS by (float32 operands, weights kind), None where none does."""
    def replacing(f32, kind):
        first = VENDOR_TABLES[vendor][operands(kind, not f32, 4 if f32 else 2)][0]
        return None if first == "GPU_CONFIGS" else first
    return {"launch_tables": launch_tables(vendor),
            "rocm_table": {f"f32={f32},kind={kind}": replacing(f32, kind) for f32 in (False, True) for kind in (0, 1)}}


VALUES = dict(gemm=gemm_value, dequant=dequant_value, split=split_value, mode=mode_value, block_m=block_m_value,
              tables=tables_value)


def evaluate() -> dict:
    """{kind: {key: value}}: the selector's value at every point of the grid."""
    return {kind: {k: VALUES[kind](*p) for k, p in pts} for kind, pts in points().items()}


def _canonical(value):
    """A value as JSON reads it back, a meta as its (name, value) pairs in launch order."""
    value = json.loads(json.dumps(value))
    if isinstance(value, dict) and isinstance(value.get("meta"), dict):
        value["meta"] = list(value["meta"].items())
    return value


def differences(want: dict, got: dict) -> list:
    """"kind key: want ... got ..." for each point whose values differ (a
    launch's constexprs in order), or that only one side has."""
    out = []
    for kind in sorted(set(want) | set(got)):
        w, g = want.get(kind, {}), got.get(kind, {})
        for k in list(w) + [k for k in g if k not in w]:
            a, b = _canonical(w.get(k)), _canonical(g.get(k))
            if a != b:
                out.append(f"{kind} [{k}]:\n  snapshot {a}\n  selector {b}")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="write the launch snapshot from the selector as it is")
    ap.add_argument("--write", action="store_true", help="write suites/targets/fixtures/launches.json")
    if ap.parse_args().write:
        write(evaluate())
    else:
        ap.print_help()
