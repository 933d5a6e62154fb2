"""A Buildkite pipeline file as data: steps flattened out of groups, each with its place in the file.

Only reads YAML (through harness.util.safe_yaml: size, depth, node and alias
limits; a key written twice is an error, as Buildkite makes it); knows
nothing of targets, lints or running.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.util import safe_yaml

STEP_KINDS = ("command", "wait", "block", "input", "trigger", "group")


class PipelineError(Exception):
    """Bad input: the message names the file, the step and the field."""


@dataclass
class Step:
    index: str  # where it sits: "steps[3]" or "steps[2].steps[0]"
    kind: str  # one of STEP_KINDS, or "unknown"
    raw: dict
    group: "Step | None" = None
    children: list["Step"] = field(default_factory=list)  # group steps only

    @property
    def key(self) -> str | None:
        for name in ("key", "identifier", "id"):
            if isinstance(self.raw.get(name), str):
                return self.raw[name]
        return None

    @property
    def label(self) -> str:
        for name in ("label", "name", "group"):
            if isinstance(self.raw.get(name), str):
                return self.raw[name]
        return self.key or self.kind

    @property
    def where(self) -> str:
        return f"{self.index} ({self.key})" if self.key else self.index

    @property
    def commands(self) -> list[str]:
        cmd = self.raw.get("command", self.raw.get("commands"))
        if isinstance(cmd, str):
            return [cmd]
        if isinstance(cmd, list):
            return [c for c in cmd if isinstance(c, str)]
        return []

    @property
    def queue(self) -> str | None:
        agents = self.raw.get("agents")
        if isinstance(agents, dict):
            q = agents.get("queue")
            return q if isinstance(q, str) else None
        if isinstance(agents, list):  # ["queue=cpu", ...]
            for item in agents:
                if isinstance(item, str) and item.startswith("queue="):
                    return item.split("=", 1)[1]
        return None

    @property
    def env(self) -> dict[str, str]:
        env = self.raw.get("env")
        return {str(k): "" if v is None else str(v) for k, v in env.items()} if isinstance(env, dict) else {}

    @property
    def parallelism(self) -> int:
        p = self.raw.get("parallelism")
        return p if isinstance(p, int) and p > 1 else 1

    def depends_on(self) -> list[tuple[str, bool]]:
        """Explicit dependencies as (key, allow_failure)."""
        deps = self.raw.get("depends_on")
        if deps is None:
            return []
        if isinstance(deps, str):
            deps = [deps]
        out = []
        for d in deps if isinstance(deps, list) else []:
            if isinstance(d, str):
                out.append((d, False))
            elif isinstance(d, dict) and isinstance(d.get("step"), str):
                out.append((d["step"], str(d.get("allow_failure", False)).lower() == "true"))
        return out

    @property
    def ignores_waits(self) -> bool:
        # `depends_on: ~` written out: the step runs at once, whatever waits precede it.
        return "depends_on" in self.raw and self.raw["depends_on"] is None


@dataclass
class Pipeline:
    path: Path
    doc: dict
    top: list[Step]  # top-level steps, groups holding their children
    text: str = ""

    @property
    def steps(self) -> list[Step]:
        """Every step, groups before their children, in file order."""
        out = []
        for s in self.top:
            out.append(s)
            out.extend(s.children)
        return out

    @property
    def command_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "command"]

    @property
    def env(self) -> dict[str, str]:
        env = self.doc.get("env")
        return {str(k): "" if v is None else str(v) for k, v in env.items()} if isinstance(env, dict) else {}

    def by_key(self) -> dict[str, Step]:
        return {s.key: s for s in self.steps if s.key}


def parallelism_problem(step: Step) -> str | None:
    """Buildkite's schema takes any integer; 0 or less would create no job and pass silently."""
    if "parallelism" not in step.raw:
        return None
    p = step.raw["parallelism"]
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        return f"parallelism: {p!r}; must be an integer >= 1 (0 or less runs no job)"
    return None


def step_kind(raw: Any) -> str:
    if isinstance(raw, str):
        return raw if raw in ("wait", "block", "input", "waiter") else "unknown"
    if not isinstance(raw, dict):
        return "unknown"
    for kind in ("group", "wait", "block", "input", "trigger"):
        if kind in raw:
            return kind
    if raw.get("type") in ("wait", "waiter"):
        return "wait"
    if any(k in raw for k in ("command", "commands", "plugins", "script")):
        return "command"
    return "unknown"


def _make_step(raw: Any, index: str, group: Step | None) -> Step:
    kind = step_kind(raw)
    if kind == "waiter":
        kind = "wait"
    if isinstance(raw, str):
        raw = {raw: None}
    elif not isinstance(raw, dict):
        raw = {}
    return Step(index=index, kind=kind, raw=raw, group=group)


def parse(doc: Any, path: Path, text: str = "") -> Pipeline:
    if isinstance(doc, list):  # a bare list of steps is a valid pipeline too
        doc = {"steps": doc}
    if not isinstance(doc, dict):
        raise PipelineError(f"{path}: the file must be a mapping with `steps`, not {type(doc).__name__}")
    if "steps" not in doc:
        raise PipelineError(f"{path}: `steps` is missing (a pipeline is a mapping with a `steps` list)")
    steps = doc.get("steps")
    if not isinstance(steps, list):
        raise PipelineError(f"{path}: `steps` must be a list, not {type(steps).__name__}")
    top = []
    for i, raw in enumerate(steps):
        step = _make_step(raw, f"steps[{i}]", None)
        if step.kind == "group" and isinstance(step.raw.get("steps"), list):
            step.children = [
                _make_step(c, f"steps[{i}].steps[{j}]", step) for j, c in enumerate(step.raw["steps"])
            ]
        top.append(step)
    return Pipeline(path=path, doc=doc, top=top, text=text)


def load(path) -> Pipeline:
    path = Path(path)
    try:
        loaded = safe_yaml.load(path, duplicates="error")
    except safe_yaml.YAMLInputError as exc:
        raise PipelineError(str(exc)) from None
    return parse(loaded.data, path, loaded.text)
