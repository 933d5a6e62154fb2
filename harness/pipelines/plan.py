"""Deciding, before anything runs, which steps of a pipeline a local run executes.

Everything the runner cannot emulate faithfully is refused here (exit 2 from
the command), with the file, the step and the field named: unknown `if`
variables, plugins, matrices, block/input/trigger steps, bad interpolation.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.pipelines import conditions, graph, interpolate, model, schema
from harness.pipelines.targets import TARGETS, target_of


class Refused(Exception):
    """The pipeline cannot be run locally as written; the message says where and why."""


@dataclass
class Decision:
    step: model.Step
    run: bool  # execute its jobs here
    reason: str = ""  # why not, when run is False


@dataclass
class Plan:
    pipeline: model.Pipeline  # interpolated
    graph: graph.Graph
    decisions: dict[int, Decision] = field(default_factory=dict)
    target: str = "cpu"
    build: dict[str, Any] = field(default_factory=dict)  # build.* values for `if`

    def decision(self, step) -> Decision:
        return self.decisions[id(step)]

    @property
    def to_run(self) -> list[model.Step]:
        return [s for s in self.graph.order if s.kind == "command" and self.decision(s).run]


def _branch_matches(patterns: Any, branch: str) -> bool:
    """Buildkite `branches`: space-separated globs, `!` excludes."""
    items = patterns.split() if isinstance(patterns, str) else [str(p) for p in patterns or []]
    include = [p for p in items if not p.startswith("!")]
    exclude = [p[1:] for p in items if p.startswith("!")]
    if any(fnmatch.fnmatchcase(branch, p) for p in exclude):
        return False
    return not include or any(fnmatch.fnmatchcase(branch, p) for p in include)


def make_plan(
    path,
    target: str,
    only: list[str] | None,
    build: dict[str, Any],
    upload_env: dict[str, str],
) -> Plan:
    if target not in TARGETS:
        raise Refused(f"--target must be one of {', '.join(TARGETS)}, not {target!r}")
    raw = model.load(path)
    problems = schema.validate(raw)
    if problems:
        raise Refused("the pipeline does not match Buildkite's schema:\n  " + "\n  ".join(map(str, problems)))
    try:
        doc = interpolate.interpolate_pipeline(raw.doc, upload_env)
    except interpolate.InterpolationError as exc:
        raise Refused(f"{path}: {exc}") from None
    pipe = model.parse(doc, Path(path), raw.text)
    g = graph.build(pipe)
    if g.problems:
        raise Refused("\n".join(f"{path}: {s.where}: {msg}" for s, msg in g.problems))

    keyed = pipe.by_key()
    for key in only or []:
        step = keyed.get(key)
        if step is None or step.kind != "command":
            raise Refused(f"{path}: --step {key}: no command step has that key")
        if target_of(step.queue) != target:
            raise Refused(
                f"{path}: {step.where}: runs on queue {step.queue!r} (target {target_of(step.queue)}), not {target}"
            )

    values = dict(build)
    values["env"] = {**upload_env, **pipe.env}
    plan = Plan(pipeline=pipe, graph=g, target=target, build=values)
    for s in pipe.steps:
        plan.decisions[id(s)] = _decide(path, s, target, only, values)
    return plan


def _decide(path, s: model.Step, target, only, values) -> Decision:
    def refuse(field_, why):
        raise Refused(f"{path}: {s.where}: {field_}: {why}")

    if s.kind in ("block", "input", "trigger"):
        if not only:
            refuse(s.kind, "block, input and trigger steps are not run locally; pick command steps with --step")
        return Decision(s, False, f"{s.kind} step")
    if s.kind == "unknown":
        refuse("step", "not a step kind the local runner knows")
    if s.kind != "command":
        return Decision(s, True)  # wait / group: bookkeeping only
    if target_of(s.queue) != target:
        return Decision(s, False, f"other target ({s.queue})")
    if only and s.key not in only:
        return Decision(s, False, "not selected with --step")
    why = model.parallelism_problem(s)
    if why:
        refuse("parallelism", why.split(": ", 1)[1])
    for unsupported in ("plugins", "matrix"):
        if s.raw.get(unsupported):
            refuse(unsupported, f"steps with {unsupported} cannot be run locally")
    cond = s.raw.get("if")
    if cond is not None:
        try:
            if not conditions.evaluate(cond, values):
                return Decision(s, False, f"if: {cond} is false")
        except conditions.UnsupportedCondition as exc:
            refuse("if", f"{cond!r}: {exc}; the local runner does not guess")
    if "branches" in s.raw and not _branch_matches(s.raw["branches"], values.get("build.branch") or ""):
        return Decision(s, False, f"branches: {s.raw['branches']!r} excludes {values.get('build.branch')!r}")
    skip = s.raw.get("skip")
    if skip not in (None, False, "false", ""):
        return Decision(s, False, f"skip: {skip}")
    return Decision(s, True)


def strip_agent_env(environ) -> dict[str, str]:
    """The environment without an outer Buildkite job's per-job variables (keep Test Engine settings)."""
    keep = ("BUILDKITE_ANALYTICS_TOKEN", "BUILDKITE_ANALYTICS_API_URL")
    return {k: v for k, v in environ.items() if not k.startswith("BUILDKITE_") or k in keep}


def default_upload_env() -> dict[str, str]:
    return strip_agent_env(os.environ)
