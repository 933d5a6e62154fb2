"""`moe-harness checkpoint synth --shape NAME --scheme nvfp4|mxfp4 --out DIR [--seed S]`
writes a synthetic checkpoint (synthetic.py); `--plan` prints what it weighs on
paper (bf16, and as the emulation holds it on a device) and writes nothing."""

from __future__ import annotations

import argparse
import json
import sys

from harness.models.shapes import GiB, SHAPES, get_shape
from harness.checkpoints.synthetic import SCHEMES, block_size, write
from harness.emulation import memory_model
from harness.schemes import get_scheme
from harness.util.interrupt import say_line

H200_BYTES = 141 * 10**9  # nominal HBM3e of one H200 (torch reports ~139.8 GiB usable)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    add_synth_parser(sub)


def add_synth_parser(sub) -> None:
    p = sub.add_parser("synth", help="write a synthetic checkpoint in the compressed-tensors layout")
    p.add_argument("--shape", required=True, choices=sorted(SHAPES))
    p.add_argument("--scheme", required=True, choices=sorted(SCHEMES))
    p.add_argument("--out", help="folder to create (must be empty or absent)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="where the weights are drawn and quantized (default: cuda if present)")
    p.add_argument("--shard-gib", type=float, default=4.0, help="bytes per safetensors shard (host memory bound)")
    p.add_argument("--plan", action="store_true", help="print sizes on paper; write nothing")


def plan(shape_name: str, scheme: str) -> dict:
    """Sizes on paper; "emulated" is the unfused backend's layer, "emulated_fused"
    the fused backend's on a GPU (its kernel format added, harness/emulation/memory_model.py),
    "emulated_fused_no_codes" that layer with its unpacked codes released
    (keep_codes=False: what the eval builds when no certified oracle is asked for)."""
    s = get_shape(shape_name)
    block = block_size(scheme)
    emu = s.emulated_bytes(block)
    row = get_scheme(SCHEMES[scheme])
    kernel = dict(fused=True, fp4=row.weight_spec.is_fp4, mma=memory_model.mma_words(row.weight_spec.name))
    fused = s.emulated_bytes(block, **kernel)
    lean = s.emulated_bytes(block, **kernel, keep_codes=False)
    return {"shape": s.name, "scheme": scheme, "params": s.params, "bf16_gib": round(s.bf16_bytes() / GiB, 1),
            "emulated_gib": round(emu / GiB, 1), "emulated_fused_gib": round(fused / GiB, 1),
            "emulated_fused_no_codes_gib": round(lean / GiB, 1),
            "disk_gib": round(s.disk_bytes(block) / GiB, 1),
            "bf16_fits_one_h200": s.bf16_bytes() < H200_BYTES,
            "emulated_fits_one_h200": emu < H200_BYTES, "emulated_fused_fits_one_h200": fused < H200_BYTES,
            "emulated_fused_no_codes_fits_one_h200": lean < H200_BYTES,
            "note": s.note}


def main(args) -> int:
    return synth(args)


def synth(args) -> int:
    if args.plan:
        print(json.dumps(plan(args.shape, args.scheme), indent=2))
        return 0
    if not args.out:
        print("moe-harness checkpoint synth: --out is required (or --plan)", file=sys.stderr)
        return 2
    if not args.shard_gib > 0:
        print(f"moe-harness checkpoint synth: --shard-gib must be > 0, got {args.shard_gib}", file=sys.stderr)
        return 2

    try:
        out = write(args.shape, args.scheme, args.out, seed=args.seed, device=args.device,
                    shard_bytes=int(args.shard_gib * GiB), progress=say_line)
    except ValueError as e:
        print(f"moe-harness checkpoint synth: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a read-only or full disk
        print(f"moe-harness checkpoint synth: cannot write {e.filename or args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0
