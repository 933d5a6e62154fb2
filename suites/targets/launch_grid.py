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

import json
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "launches.json"

VENDORS = ("cuda", "rocm", "interpreter")
FORMATS = ("nvfp4", "mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2")
BLOCK_MS = (16, 32, 64, 128)
# (N, K): N and K unknown (0, as the compile check asks), K on either side of
# SHORT_K_MAX (1024), and tails on either side of every table tile (BLOCK_N
# 16..256, BLOCK_K 32..512)
NK = ((0, 0), (0, 1024), (96, 32), (256, 768), (96, 1040), (256, 1056), (96, 14336))
# the weights of a GEMM launch: element codes decoded in the K loop, float
# weights as given (2- and 4-byte), mode "predequant"'s scratch
WEIGHTS = ("codes:mxfp4", "codes:nvfp4", "float:2", "float:4", "scratch")
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
                post = bf16 and weights in ("codes:nvfp4", "scratch")
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
            for kind, fmt in ((1, "mxfp4"), (0, None)):
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
