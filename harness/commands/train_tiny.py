"""`moe-harness train-tiny`: train the bundled tiny MoE model on CPU,
deterministically (harness.models.train)."""
from __future__ import annotations

import argparse
import json

from harness.models import corpus, tiny_model
from harness.models.train import DEFAULTS, train


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(tiny_model.BUNDLED_DIR), help="output folder (default: the bundled tiny_moe/)")
    parser.add_argument("--seed", type=int, default=corpus.DEFAULT_SEED)
    parser.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    parser.add_argument("--batch", type=int, default=DEFAULTS["batch"])
    parser.add_argument("--seq-len", type=int, default=DEFAULTS["seq_len"])
    parser.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    parser.add_argument("--threads", type=int, default=DEFAULTS["threads"], help="torch threads (pin for determinism)")


def main(args) -> int:
    meta = train(args.out, seed=args.seed, steps=args.steps, batch=args.batch, seq_len=args.seq_len,
                 lr=args.lr, threads=args.threads, quiet=getattr(args, "quiet", False))
    rep = getattr(args, "report", None)
    if rep is not None:
        rep.record({"name": f"train-tiny -> {args.out}", "passed": True,
                    "details": {k: v for k, v in meta.items() if not isinstance(v, (list, dict))}})
    print(json.dumps(meta, indent=2))
    return 0
