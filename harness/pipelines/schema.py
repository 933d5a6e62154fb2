"""Validation against Buildkite's official pipeline schema.

The schema is the copy that check-jsonschema vendors (Buildkite's
pipeline-schema repository), read from the installed package: nothing is
downloaded at run time and nothing is written by hand here.

The whole file is validated as one document (the verdict), and each step is
validated on its own against the definition of its kind, because the
top-level `anyOf` over step kinds only says "not valid under any of the given
schemas" -- useless to a reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import jsonschema

from harness.pipelines.model import Pipeline, Step

SCHEMA_PACKAGE = "check_jsonschema.builtin_schemas.vendor"
SCHEMA_FILE = "buildkite.json"

# Which schema definition a step of each kind must satisfy.
_DEFINITION = {
    "command": "commandStep",
    "wait": "waitStep",
    "block": "blockStep",
    "input": "inputStep",
    "trigger": "triggerStep",
    "group": "groupStep",
}


@dataclass(frozen=True)
class Problem:
    file: str
    where: str  # "steps[3] (cpu-unit)" or "pipeline"
    message: str
    check: str = "schema"

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}"


@lru_cache(maxsize=1)
def load_schema() -> dict:
    try:
        text = resources.files(SCHEMA_PACKAGE).joinpath(SCHEMA_FILE).read_text("utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise RuntimeError(
            "the Buildkite pipeline schema comes from the check-jsonschema package; "
            "install the `pipelines` extra (pip install -e '.[pipelines]')"
        ) from exc
    return json.loads(text)


def _validator(schema: dict):
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def _path(error) -> str:
    parts = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts)


def _message(error) -> str:
    # Inside an anyOf/oneOf the sub-error that got deepest into the value
    # says what is wrong (the branch that matched the value's shape).
    while error.context:
        error = max(error.context, key=lambda e: len(e.absolute_path))
    path = _path(error)
    return f"{path}: {error.message}" if path else error.message


def _step_problems(file: str, step: Step, schema: dict) -> list[Problem]:
    if step.kind == "unknown":
        return [Problem(file, step.where, "not a step Buildkite knows (no command, wait, block, input, trigger or group)")]
    raw = step.raw
    if step.kind == "group":
        raw = {k: v for k, v in raw.items() if k != "steps"}  # children are checked one by one
        raw["steps"] = ["wait"]  # a placeholder the schema accepts
    if step.kind == "wait" and list(raw) == ["wait"]:
        return []  # the string shorthand "wait"
    sub = {"$ref": f"#/definitions/{_DEFINITION[step.kind]}", "definitions": schema["definitions"]}
    errors = sorted(_validator(sub).iter_errors(raw), key=lambda e: list(e.absolute_path))
    return [Problem(file, step.where, _message(e)) for e in errors]


def validate(pipeline: Pipeline) -> list[Problem]:
    schema = load_schema()
    file = str(pipeline.path)
    problems: list[Problem] = []
    for step in pipeline.steps:
        problems.extend(_step_problems(file, step, schema))
    whole = list(_validator(schema).iter_errors(pipeline.doc))
    for e in whole:
        path = list(e.absolute_path)
        if path[:1] == ["steps"] and problems:
            continue  # already explained step by step
        if path[:1] == ["steps"] and len(path) >= 2:
            where = f"steps[{path[1]}]"
        else:
            where = "pipeline"
        problems.append(Problem(file, where, _message(e)))
    return problems
