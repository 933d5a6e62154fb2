"""A local stand-in for `buildkite-agent`, put first on PATH by the local runner.

Understood (the subset pipeline commands use):
  annotate [BODY] [--style S] [--context C] [--append] [--priority N]
      BODY or stdin -> <run>/annotations/<context>.md (+ .json with the style)
  artifact upload PATTERN[;PATTERN...] [DESTINATION]
      copies matches into <run>/artifacts/<step-key>[#job]/
  artifact download PATTERN DESTINATION [--step KEY]
      copies uploaded artifacts (from every step of this run) back out
  meta-data set KEY [VALUE] | get KEY [--default D] | exists KEY | keys
      <run>/meta-data.json
Anything else exits 1 and says it is not available locally.
The run folder comes from HARNESS_PIPELINE_RUN_DIR, set by the runner.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import json
import os
import re
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from harness.util import report
from harness.pipelines.runner import find_artifacts


def _run_dir() -> Path:
    d = os.environ.get("HARNESS_PIPELINE_RUN_DIR")
    if not d:
        sys.exit("buildkite-agent (local stand-in): HARNESS_PIPELINE_RUN_DIR is not set; run through `moe-harness pipeline run`")
    return Path(d)


# A context names a file in <run>/annotations/: a plain name, nothing that walks out.
_CONTEXT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+=-]{0,99}")


def annotate(args) -> int:
    context = args.context or "default"
    if not _CONTEXT_RE.fullmatch(context):
        print(f"buildkite-agent (local stand-in): annotate --context {context!r}: use letters, digits and "
              "_.@+=- (at most 100, not starting with '.' or '-'); it names a file in the run folder",
              file=sys.stderr)
        return 1
    body = args.body
    if body is None:
        body = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    folder = _run_dir() / "annotations"
    md = folder / f"{context}.md"
    if args.append and md.exists():
        body = md.read_text() + body
    report.atomic_write_text(md, body)
    report.atomic_write_json(folder / f"{context}.json", {
        "context": context, "style": args.style or "default", "priority": args.priority,
        "step": os.environ.get("BUILDKITE_STEP_KEY"),
    })
    return 0


def artifact_upload(args) -> int:
    root = Path(os.environ.get("BUILDKITE_BUILD_CHECKOUT_PATH") or os.getcwd())
    dest = Path(os.environ.get("HARNESS_PIPELINE_ARTIFACTS") or _run_dir() / "artifacts" / "unknown")
    if args.destination:
        print("buildkite-agent (local stand-in): artifact upload DESTINATION ignored; artifacts stay in the run folder", file=sys.stderr)
    n = 0
    for pattern in args.pattern.split(";"):
        for name in glob.glob(str(root / pattern.strip()), recursive=True):
            src = Path(name)
            if src.is_file():
                try:
                    rel = src.resolve().relative_to(root.resolve())
                except ValueError:
                    print(f"buildkite-agent (local stand-in): artifact upload: {name} is outside the checkout "
                          f"{root}; not uploaded", file=sys.stderr)
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
                n += 1
    print(f"buildkite-agent (local stand-in): uploaded {n} artifact(s) to {dest}", file=sys.stderr)
    return 0


def artifact_download(args) -> int:
    run = _run_dir()
    found = find_artifacts(run, args.pattern)
    if args.step:
        found = [(f, rel) for f, rel in found if f.relative_to(run / "artifacts").parts[0].split("#")[0] == args.step]
    if not found:
        print(f"buildkite-agent (local stand-in): no artifacts match {args.pattern!r}", file=sys.stderr)
        return 1
    for f, rel in found:
        target = Path(args.destination) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.resolve() != f.resolve():
            shutil.copy2(f, target)
    print(f"buildkite-agent (local stand-in): downloaded {len(found)} artifact(s)", file=sys.stderr)
    return 0


@contextmanager
def _meta_data():
    path = _run_dir() / "meta-data.json"
    with open(_run_dir() / ".meta-data.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel jobs share the file
        data = json.loads(path.read_text()) if path.exists() else {}
        yield data
        report.atomic_write_json(path, data)


def meta_data(args) -> int:
    with _meta_data() as data:
        if args.action == "set":
            value = args.value if args.value is not None else sys.stdin.read()
            data[args.key] = value
        elif args.action == "get":
            if args.key in data:
                print(data[args.key], end="")
            elif args.default is not None:
                print(args.default, end="")
            else:
                print(f"buildkite-agent (local stand-in): no meta-data {args.key!r}", file=sys.stderr)
                return 1
        elif args.action == "exists":
            return 0 if args.key in data else 100  # the real agent's "does not exist" status
        elif args.action == "keys":
            print("\n".join(sorted(data)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="buildkite-agent", description="local stand-in (moe-harness)")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("annotate")
    a.add_argument("body", nargs="?")
    a.add_argument("--style")
    a.add_argument("--context")
    a.add_argument("--append", action="store_true")
    a.add_argument("--priority", type=int)
    a.add_argument("--job")
    a.set_defaults(fn=annotate)
    art = sub.add_parser("artifact").add_subparsers(dest="action", required=True)
    up = art.add_parser("upload")
    up.add_argument("pattern")
    up.add_argument("destination", nargs="?")
    up.set_defaults(fn=artifact_upload)
    down = art.add_parser("download")
    down.add_argument("pattern")
    down.add_argument("destination")
    down.add_argument("--step")
    down.add_argument("--build")
    down.set_defaults(fn=artifact_download)
    md = sub.add_parser("meta-data")
    md.add_argument("action", choices=["set", "get", "exists", "keys"])
    md.add_argument("key", nargs="?")
    md.add_argument("value", nargs="?")
    md.add_argument("--default")
    md.set_defaults(fn=meta_data)
    return p


KNOWN = ("annotate", "artifact", "meta-data")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in KNOWN:
        what = argv[0] if argv else "(nothing)"
        print(f"buildkite-agent (local stand-in): {what!r} is not available locally; supported: {', '.join(KNOWN)}",
              file=sys.stderr)
        return 1
    args = build_parser().parse_args(argv)
    return int(args.fn(args) or 0)
