"""`moe-harness pipeline validate | run | junit-annotate | generate`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from harness.pipelines import lints, model, schema
from harness.pipelines.targets import TARGETS
from harness.pipelines.junit_annotate import annotate
from harness.moe.schemes import SCHEME_NAMES  # the one scheme table; wiring, not a step
from harness.pipelines import nightly
from harness.pipelines.plan import Refused, default_upload_env, make_plan
from harness.pipelines.runner import Options, Runner


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pipeline_command", required=True)

    v = sub.add_parser("validate", help="Buildkite schema + harness lints")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.add_argument("--root", default=None,
                   help="checkout the commands run in (default: the git checkout holding each FILE, else .)")

    r = sub.add_parser(
        "run", help="EXECUTE a pipeline's step commands for one target on this machine",
        description="Executes the shell commands of the pipeline's steps (bash -e -c, in --root, with "
                    "the step env) on this machine, as a Buildkite agent would: run only pipelines you "
                    "trust, and use --dry-run first to see which steps would run. Ctrl-C or SIGTERM kills "
                    "every running job and writes the report of those that finished (exit 130 / 143).")
    r.add_argument("file", metavar="FILE")
    r.add_argument("--target", required=True, choices=TARGETS)
    r.add_argument("--step", action="append", metavar="KEY", help="only this step (repeatable)")
    r.add_argument("--root", default=".", help="checkout the commands run in (default: .)")
    r.add_argument("-j", "--jobs", type=int, default=1, help="parallel jobs of one step run at once (default 1)")
    r.add_argument("-v", "--verbose", action="store_true", help="stream job output")
    r.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    r.add_argument("--branch", help="build.branch / BUILDKITE_BRANCH (default: the git branch)")
    r.add_argument("--source", default="local", help="build.source, e.g. schedule for nightly conditions")
    r.add_argument("--minute-seconds", type=float, default=60.0,
                   help="length of a timeout_in_minutes minute in seconds (tests shrink it)")
    r.add_argument("--grace-seconds", type=float, default=10.0, help="SIGTERM to SIGKILL on timeout")

    a = sub.add_parser("junit-annotate", help="one Buildkite annotation from JUnit XML files")
    a.add_argument("patterns", nargs="+", metavar="GLOB")
    a.add_argument("--context", default="junit")

    g = sub.add_parser("generate", help="write buildkite/nightly.yml from the scheme table (--check: compare only)")
    g.add_argument("--root", default=".", help="checkout holding buildkite/ and suites/ (default: .)")
    g.add_argument("--check", action="store_true", help="exit 1 if the committed file differs; write nothing")


def OWN_REPORT(args) -> bool:
    """`run` and `junit-annotate` write their own report folder (under --reports)."""
    return args.pipeline_command in ("run", "junit-annotate")


def prints_only(args) -> bool:
    return args.pipeline_command == "run" and args.dry_run


def main(args) -> int:
    if args.pipeline_command == "validate":
        return validate(args.files, Path(args.root) if args.root else None, getattr(args, "report", None))
    if args.pipeline_command == "run":
        if args.jobs < 1:
            print(f"moe-harness pipeline run: --jobs {args.jobs}: must be >= 1", file=sys.stderr)
            return 2
        return run(args)
    if args.pipeline_command == "junit-annotate":
        return annotate(args.patterns, context=args.context, reports_root=getattr(args, "reports", "reports"))
    if args.pipeline_command == "generate":
        return generate(Path(args.root), check=args.check)
    raise AssertionError(args.pipeline_command)


def generate(root: Path, check: bool = False) -> int:
    """Write (or with check, compare) buildkite/nightly.yml."""

    text = nightly.render(SCHEME_NAMES, nightly.checkpoint_configs(root), nightly.tiny_family_configs(root))
    path = root / nightly.NIGHTLY_PATH
    if check:
        current = path.read_text() if path.is_file() else None
        if current != text:
            print(f"{nightly.NIGHTLY_PATH}: differs from the generated pipeline; run `moe-harness pipeline generate`",
                  file=sys.stderr)
            return 1
        print(f"{nightly.NIGHTLY_PATH}: up to date")
        return 0
    path.write_text(text)
    print(f"wrote {nightly.NIGHTLY_PATH}")
    return 0


def checkout_of(path) -> Path:
    """The git checkout a pipeline file belongs to (where its commands run), else the current folder."""
    here = Path(path).resolve().parent
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d
    return Path.cwd()


def validate(files, root: Path | None = None, rep=None) -> int:
    """0 all clean; 1 schema or lint problems; 2 a file could not be read as a pipeline."""
    unreadable = problems_found = 0
    for f in files:
        try:
            p = model.load(f)
        except model.PipelineError as exc:
            print(exc)
            unreadable += 1
            continue
        problems = schema.validate(p) + lints.lint(p, root if root is not None else checkout_of(f))
        for prob in problems:
            print(f"{prob}  [{prob.check}]")
        problems_found += bool(problems)
        if not problems:
            print(f"ok {f}: {len(p.command_steps)} command steps")
        if rep is not None:
            rep.record({"name": f"pipeline validate {f}", "passed": not problems,
                        "message": "\n".join(f"{prob}  [{prob.check}]" for prob in problems)})
    return 2 if unreadable else (1 if problems_found else 0)


def _git(root: Path, *argv) -> str | None:
    try:
        out = subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def build_values(root: Path, branch: str | None, source: str) -> dict:
    return {
        "build.branch": branch or _git(root, "rev-parse", "--abbrev-ref", "HEAD") or "main",
        "build.commit": _git(root, "rev-parse", "HEAD") or "HEAD",
        "build.message": _git(root, "log", "-1", "--pretty=%s") or "",
        "build.source": source,
        "build.number": 0,
        "build.tag": None,
        "build.pull_request.id": None,
        "build.pull_request.base_branch": None,
        "build.pull_request.draft": None,
        "pipeline.slug": "local",
        "pipeline.default_branch": "main",
    }


def run(args) -> int:
    root = Path(args.root).resolve()
    build = build_values(root, args.branch, args.source)
    upload_env = default_upload_env()
    upload_env.update({"BUILDKITE_BRANCH": build["build.branch"], "BUILDKITE_COMMIT": build["build.commit"],
                       "BUILDKITE_BUILD_NUMBER": "0", "BUILDKITE": "true", "CI": "true"})
    try:
        plan = make_plan(args.file, args.target, args.step, build, upload_env)
    except (Refused, model.PipelineError) as exc:
        print(f"moe-harness pipeline run: refused: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for s in plan.graph.order:
            if s.kind != "command":
                continue
            d = plan.decision(s)
            jobs = s.raw.get("parallelism")
            what = f"run ({jobs} jobs)" if d.run and jobs else ("run" if d.run else f"skip: {d.reason}")
            print(f"{s.key}: {what}")
        return 0
    hint = f"moe-harness pipeline run {args.file} --target {args.target}"
    opts = Options(root=root, jobs=args.jobs, minute=args.minute_seconds, grace=args.grace_seconds,
                   verbose=args.verbose, quiet=getattr(args, "quiet", False), reports_root=root / getattr(args, "reports", "reports"))  # relative: in --root
    return Runner(plan, opts, hint).run()
