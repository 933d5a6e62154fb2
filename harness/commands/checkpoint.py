"""`moe-harness checkpoint make --producer P --scheme S [--force] [--out DIR]`
`moe-harness checkpoint check DIR [--expect FORMAT]`
`moe-harness checkpoint list`
`moe-harness checkpoint synth --shape S --scheme nvfp4|mxfp4 --out DIR` (checkpoint_synth.py)

make: quantize the bundled tiny MoE with the producer library (cached; a
progress line every few seconds while the producer runs), print the folder
(exit 0; with --out, a copy there), 4 when the producer is not installed (the
reason is printed), 1 when it fails. check: read a folder as its producer
wrote it and run the round-trip proof against the producer's own
dequantization: exit 0 when it holds, 1 on a mismatch or when the folder
holds another format than --expect names (findings), 2 when FOLDER is not a
checkpoint folder or is refused (bad input: one line naming the file, tensor,
expert and field). make exits 2 on a bad argument or a cache that cannot be
written (one line).

Every action handles SIGINT and SIGTERM: a make's worker group gets
SIGTERM, a grace period, then SIGKILL; temporary folders are removed; one
line says so; exit 130 (SIGINT) or 143 (SIGTERM), no traceback."""
from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from pathlib import Path

from harness.checkpoints import detect, producers
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import identify, load_checkpoint
from harness.checkpoints.make import MakeFailed, ProducerUnavailable, cached_path, make_checkpoint
from harness.checkpoints.roundtrip import roundtrip
from harness.commands.checkpoint_synth import add_synth_parser, synth
from harness.commands.convention import refuse
from harness.util import interrupt

PRODUCER_UNAVAILABLE = 4
HEARTBEAT_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    m = sub.add_parser("make", help="make a producer checkpoint of the bundled tiny MoE (cached)",
                       description="make a producer checkpoint of the bundled tiny MoE (cached)")
    m.add_argument("--producer", required=True, choices=sorted(producers.PRODUCERS))
    m.add_argument("--scheme", required=True, help="the producer's scheme (see `checkpoint list`)")
    m.add_argument("--force", action="store_true", help="make again even if cached")
    m.add_argument("--out", default=None, metavar="DIR", help="also copy the made folder here (absent or empty)")
    m._harness_extra_codes = ((PRODUCER_UNAVAILABLE, "the producer's libraries are not installed (reason printed)"),)
    c = sub.add_parser("check", help="load a checkpoint folder and prove the round trip",
                       description="load a checkpoint folder and prove the round trip")
    c.add_argument("folder")
    c.add_argument("--expect", default=None, choices=detect.FORMAT_NAMES,
                   help="the producer format the folder must hold")
    sub.add_parser("list", help="producers, schemes, formats and whether each is installed")
    add_synth_parser(sub)


def prints_only(args) -> bool:
    return args.action == "list" or (args.action == "synth" and bool(getattr(args, "plan", False)))


def _say(args, line: str) -> None:
    """Progress on stderr: stdout carries the made folder (scripts read it)."""
    if not getattr(args, "quiet", False):
        interrupt.say_line(line)


def _record(args, result: dict) -> None:
    rep = getattr(args, "report", None)
    if rep is not None:
        rep.record(result)


def _heartbeat(args, log: Path, done: threading.Event, t0: float) -> None:
    """A line every HEARTBEAT_S while the producer runs: elapsed time and the
    last line of its log (the producer's own phase messages)."""
    while not done.wait(HEARTBEAT_S):
        last = ""
        try:
            lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            last = lines[-1][:120] if lines else ""
        except OSError:
            pass
        _say(args, f"      {time.perf_counter() - t0:5.0f}s  {last or 'starting the producer'}")


def _make(args) -> int:
    try:
        producers.harness_scheme(args.producer, args.scheme)
        if args.out and Path(args.out).exists() and (not Path(args.out).is_dir() or any(Path(args.out).iterdir())):
            raise ValueError(f"--out {args.out}: exists and is not an empty folder")
        folder = cached_path(args.producer, args.scheme)
        folder.parent.mkdir(parents=True, exist_ok=True)
    except ValueError as e:
        return refuse("checkpoint make", e)
    except OSError as e:  # a read-only or full cache, or a file in its path
        return refuse("checkpoint make", f"cannot write the cache: {e.filename or ''}: {e.strerror or e}")
    _say(args, f"checkpoint make: {args.producer} {args.scheme} -> {folder}"
         + ("" if args.force or not (folder / "made.json").is_file() else " (cached)"))
    done, t0 = threading.Event(), time.perf_counter()
    beat = threading.Thread(target=_heartbeat, args=(args, folder.parent / f"{folder.name}.log", done, t0), daemon=True)
    beat.start()
    try:
        made = make_checkpoint(args.producer, args.scheme, force=args.force)
    except ProducerUnavailable as e:
        print(f"moe-harness checkpoint make: SKIPPED: {e}", file=sys.stderr)
        _record(args, {"name": f"checkpoint make {args.producer} {args.scheme}", "skipped": True, "passed": True,
                       "message": str(e)})
        return PRODUCER_UNAVAILABLE
    except MakeFailed as e:
        print(f"moe-harness checkpoint make: {e}", file=sys.stderr)
        _record(args, {"name": f"checkpoint make {args.producer} {args.scheme}", "passed": False, "message": str(e)})
        return 1
    except OSError as e:  # a read-only or full cache
        return refuse("checkpoint make", f"cannot write the cache: {e.filename or ''}: {e.strerror or e}")
    finally:
        done.set()
    if args.out:
        shutil.copytree(made, args.out, dirs_exist_ok=True)
        made = Path(args.out)
    _say(args, f"      {time.perf_counter() - t0:5.0f}s  done")
    _record(args, {"name": f"checkpoint make {args.producer} {args.scheme}", "passed": True,
                   "details": {"folder": str(made), "seconds": round(time.perf_counter() - t0, 1)}})
    print(made)
    return 0


def _check(args) -> int:
    folder = Path(args.folder)
    try:  # a missing folder, a link loop, a folder without config.json: refused, one line naming it
        _, fmt, _ = identify(folder)
    except CheckpointFormatError as e:
        return refuse("checkpoint check", e)
    if args.expect is not None and fmt != args.expect:  # the folder fails the user's expectation: a finding
        message = f"--expect {args.expect}: {folder} holds a {fmt} checkpoint"
        print(f"moe-harness checkpoint check: {message}", file=sys.stderr)
        _record(args, {"name": f"checkpoint check {folder}", "passed": False, "message": message})
        return 1
    try:
        load_checkpoint(folder, expect=fmt)
        rt = roundtrip(folder)
    except CheckpointFormatError as e:  # refused: bad input, one line naming file, tensor, expert, field
        return refuse("checkpoint check", e)
    print(rt.summary())
    _record(args, {"name": f"checkpoint check {folder} ({fmt})", "passed": bool(rt.ok), "message": rt.summary()})
    return 0 if rt.ok else 1


def _list(args) -> int:
    for name, p in producers.PRODUCERS.items():
        ok, why = producers.available(name)
        schemes = ", ".join(f"{s} -> {h}" for s, h in p.schemes.items())
        print(f"{name:14s} format {p.fmt:18s} {schemes}\n{'':14s} {'installed: ' + why if ok else 'NOT AVAILABLE: ' + why}")
    return 0


def _synth(args) -> int:
    rc = synth(args)
    if rc == 0 and not args.plan:
        _record(args, {"name": f"checkpoint synth {args.shape} {args.scheme}", "passed": True,
                       "details": {"out": args.out}})
    return rc


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
