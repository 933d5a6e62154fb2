"""`moe-harness checkpoint make --producer P --scheme S [--force]`
`moe-harness checkpoint check DIR [--expect FORMAT]`
`moe-harness checkpoint list`
`moe-harness checkpoint synth --shape S --scheme nvfp4|mxfp4 --out DIR` (synth_command.py)

make: quantize the bundled tiny MoE with the producer library, print the
cached version folder (exit 0), 4 when the producer is not installed (the
reason is printed), 1 when it fails, 2 on a bad argument or a cache that
cannot be written (one line). check: read a folder as its producer wrote it and
run the round-trip proof against the producer's own dequantization: exit 0
when it holds, 1 on a mismatch (a finding), 2 when the folder is refused
(bad input: one line naming the file, tensor, expert and field).

Every action handles SIGINT and SIGTERM: a make's worker group gets
SIGTERM, a grace period, then SIGKILL; temporary folders are removed; one
line says so; exit 130 (SIGINT) or 143 (SIGTERM), no traceback."""
from __future__ import annotations

import argparse
import sys

from harness.checkpoints import detect, producers
from harness.util import interrupt
from harness.commands.checkpoint_synth import add_synth_parser
from harness.checkpoints.make import MakeFailed, ProducerUnavailable, make_checkpoint
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import load_checkpoint
from harness.checkpoints.roundtrip import roundtrip
from harness.commands.checkpoint_synth import synth


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    m = sub.add_parser("make", help="make a producer checkpoint of the bundled tiny MoE (cached)")
    m.add_argument("--producer", required=True, choices=sorted(producers.PRODUCERS))
    m.add_argument("--scheme", required=True, help="the producer's scheme (see `checkpoint list`)")
    m.add_argument("--force", action="store_true", help="make again even if cached")
    c = sub.add_parser("check", help="load a checkpoint folder and prove the round trip")
    c.add_argument("folder")
    c.add_argument("--expect", default=None, choices=detect.FORMAT_NAMES,
                   help="the producer format the folder must hold")
    sub.add_parser("list", help="producers, schemes, formats and whether each is installed")

    add_synth_parser(sub)


def _make(args) -> int:
    try:
        producers.harness_scheme(args.producer, args.scheme)
        print(make_checkpoint(args.producer, args.scheme, force=args.force))
    except ValueError as e:
        print(f"moe-harness checkpoint make: {e}", file=sys.stderr)
        return 2
    except ProducerUnavailable as e:
        print(f"moe-harness checkpoint make: SKIPPED: {e}", file=sys.stderr)
        return 4
    except MakeFailed as e:
        print(f"moe-harness checkpoint make: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a read-only or full cache
        print(f"moe-harness checkpoint make: cannot write the cache: {e.filename or ''}: {e.strerror or e}",
              file=sys.stderr)
        return 2
    return 0


def _check(args) -> int:
    try:
        load_checkpoint(args.folder, expect=args.expect)
        rt = roundtrip(args.folder)
    except CheckpointFormatError as e:
        print(f"moe-harness checkpoint check: {e}", file=sys.stderr)
        return 2
    print(rt.summary())
    return 0 if rt.ok else 1


def _list(args) -> int:
    for name, p in producers.PRODUCERS.items():
        ok, why = producers.available(name)
        schemes = ", ".join(f"{s} -> {h}" for s, h in p.schemes.items())
        print(f"{name:14s} format {p.fmt:18s} {schemes}\n{'':14s} {'installed: ' + why if ok else 'NOT AVAILABLE: ' + why}")
    return 0


def _synth(args) -> int:
    return synth(args)


AFTER_INTERRUPT = {"make": "the maker stopped, its temporary folder removed, the cached entry unchanged",
                   "synth": "its temporary folder removed, nothing written at --out",
                   "check": "nothing was written", "list": "nothing was written"}


def main(args) -> int:
    action = {"make": _make, "check": _check, "list": _list, "synth": _synth}[args.action]
    with interrupt.catch_signals():
        try:
            return action(args)
        except KeyboardInterrupt as e:
            print(f"moe-harness checkpoint {args.action}: interrupted ({interrupt.signal_name(e)}); "
                  f"{AFTER_INTERRUPT[args.action]}", file=sys.stderr, flush=True)
            return interrupt.exit_code(e)
