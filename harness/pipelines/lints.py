"""The harness's own rules for pipeline files, beyond what Buildkite's schema checks.

Each lint is a function (pipeline, root) -> list[Problem]; LINTS lists them
by name. `root` is the checkout the commands run in (files are looked up there).
"""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

from harness.pipelines import graph, shell_refs
from harness.pipelines.model import Pipeline, Step, parallelism_problem
from harness.pipelines.schema import Problem
from harness.pipelines.targets import (
    RETRY_REQUIRED,
    ROCM_ARCH,
    ROCM_EXEMPT_ENV,
    SOFT_FAIL_ENV,
    target_of,
)


def _p(pipeline: Pipeline, step: Step | None, check: str, message: str) -> Problem:
    return Problem(str(pipeline.path), step.where if step else "pipeline", message, check)


# ---- every command step has a command, key, label, timeout, queue and artifacts


def required_fields(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for s in pipeline.command_steps:
        def bad(msg):
            out.append(_p(pipeline, s, "required-fields", msg))

        if not s.commands:
            bad("command: missing (every command step runs a command)")
        if not s.key:
            bad("key: missing (depends_on, retries and `--step` need it)")
        if not s.raw.get("label"):
            bad("label: missing")
        if "timeout_in_minutes" not in s.raw:  # its type is the schema's business
            bad("timeout_in_minutes: missing (a hung GPU must not hold an agent forever)")
        if not s.queue:
            bad("agents.queue: missing")
        elif target_of(s.queue) is None:
            bad(f"agents.queue: {s.queue!r} is not a known queue (cpu, cuda-*, rocm-*)")
        if not s.raw.get("artifact_paths"):
            bad("artifact_paths: missing (reports and JUnit XML must be uploaded)")
        why = parallelism_problem(s)
        if why:
            bad(why)
    return out


# ---- automatic retry for lost agents, stopped agents and (GPU steps) hangs


def _retry_statuses(step: Step) -> set:
    retry = step.raw.get("retry")
    auto = retry.get("automatic") if isinstance(retry, dict) else None
    if auto in (True, "true"):
        return {"*"}
    rules = auto if isinstance(auto, list) else [auto] if isinstance(auto, dict) else []
    out: set = set()
    for r in rules:
        if not isinstance(r, dict) or str(r.get("limit", 2)) == "0":
            continue
        st = r.get("exit_status", "*")
        out.update(st if isinstance(st, list) else [st])
    return out


def retry_policy(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for s in pipeline.command_steps:
        have = _retry_statuses(s)
        if "*" in have:
            continue
        need = list(RETRY_REQUIRED["all"])
        if target_of(s.queue) in ("cuda", "rocm"):
            need += RETRY_REQUIRED["gpu"]
        missing = [n for n in need if n not in have]
        if missing:
            out.append(_p(pipeline, s, "retry", f"retry.automatic: no rule for exit status {missing}"))
    return out


# ---- soft_fail only with a written reason


def soft_fail_reason(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for s in pipeline.command_steps:
        sf = s.raw.get("soft_fail")
        if sf in (None, False, "false", []):
            continue
        if not s.env.get(SOFT_FAIL_ENV, "").strip():
            out.append(_p(pipeline, s, "soft-fail", f"soft_fail without a reason: set env.{SOFT_FAIL_ENV}"))
    return out


# ---- depends_on names existing keys, no cycles, no duplicate keys


def dependencies(pipeline: Pipeline, root: Path) -> list[Problem]:
    return [_p(pipeline, s, "depends-on", msg) for s, msg in graph.build(pipeline).problems]


# ---- files a command names exist


def _first_match(pattern: str, root: Path) -> bool:
    """Does the glob match a file under `root`? Stops at the first match; the
    pattern is relative and does not leave the checkout (shell_refs drops the rest)."""
    return next(glob.iglob(pattern, root_dir=root, recursive=True), None) is not None


def referenced_files(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    root = Path(root).resolve()
    for s in pipeline.command_steps:
        try:
            refs = shell_refs.path_refs(s.commands)
            configs = {c for cmd in s.commands for c in _eval_configs(cmd)}  # the lm-eval lint reports those
        except ValueError as exc:
            out.append(_p(pipeline, s, "files", f"command is not valid shell ({exc}): {s.commands!r}"))
            continue
        for ref in refs:
            if ref in configs:
                continue
            if glob.has_magic(ref):
                if not _first_match(ref, root):
                    out.append(_p(pipeline, s, "files", f"command names {ref!r}, which matches no file"))
            elif not (root / ref).exists():
                out.append(_p(pipeline, s, "files", f"command names {ref!r}, which does not exist"))
    return out


# ---- lm-eval steps name existing configs


def _eval_configs(command: str) -> list[str | None]:
    words = shlex.split(command, comments=True)
    found = []
    for i, w in enumerate(words[:-1]):
        if w.endswith("moe-harness") and words[i + 1] == "eval":
            cfg = None
            rest = words[i + 2:]
            for j, a in enumerate(rest):
                if a == "--config" and j + 1 < len(rest):
                    cfg = rest[j + 1]
                elif a.startswith("--config="):
                    cfg = a.split("=", 1)[1]
            found.append(cfg)
    return found


def lm_eval_configs(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for s in pipeline.command_steps:
        for c in s.commands:
            try:
                configs = _eval_configs(c)
            except ValueError:
                continue  # referenced_files reports bad shell
            for cfg in configs:
                if cfg is None:
                    out.append(_p(pipeline, s, "lm-eval", "`moe-harness eval` without --config"))
                elif not (root / cfg).is_file():
                    out.append(_p(pipeline, s, "lm-eval", f"lm-eval config {cfg!r} does not exist"))
    return out


# ---- every CUDA suite also runs on ROCm gfx942, unless the step says why not


def _gpu_neutral(text: str) -> str:
    return re.sub(r"cuda|rocm", "{gpu}", text, flags=re.IGNORECASE)


def rocm_parity(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    keyed = pipeline.by_key()
    for s in pipeline.command_steps:
        if target_of(s.queue) != "cuda":
            continue
        if ROCM_EXEMPT_ENV in s.env:
            if not s.env[ROCM_EXEMPT_ENV].strip():
                out.append(_p(pipeline, s, "rocm-parity", f"env.{ROCM_EXEMPT_ENV} is empty: write the reason"))
            continue
        key = s.key or ""
        if "cuda" not in key:
            out.append(_p(pipeline, s, "rocm-parity",
                          f"CUDA step key {key!r} does not name its target (e.g. cuda-kernels), so no ROCm twin can be found; "
                          f"or set env.{ROCM_EXEMPT_ENV}"))
            continue
        twin_key = key.replace("cuda", "rocm")
        twin = keyed.get(twin_key)
        if twin is None or target_of(twin.queue) != "rocm":
            out.append(_p(pipeline, s, "rocm-parity",
                          f"runs on CUDA but no ROCm step {twin_key!r} runs it on gfx942; add one or set env.{ROCM_EXEMPT_ENV}"))
            continue
        if [_gpu_neutral(c) for c in s.commands] != [_gpu_neutral(c) for c in twin.commands]:
            out.append(_p(pipeline, s, "rocm-parity",
                          f"its ROCm twin {twin_key!r} runs different commands (beyond the words cuda/rocm)"))
    return out


def rocm_arch(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for s in pipeline.command_steps:
        if target_of(s.queue) != "rocm":
            continue
        arch = {**pipeline.env, **s.env}.get("PYTORCH_ROCM_ARCH")
        if arch is None:
            out.append(_p(pipeline, s, "rocm-arch",
                          f"env.PYTORCH_ROCM_ARCH is not set (neither in the step's env nor the pipeline's); "
                          f"ROCm steps must JIT-build for {ROCM_ARCH!r} only"))
        elif arch != ROCM_ARCH:
            out.append(_p(pipeline, s, "rocm-arch",
                          f"env.PYTORCH_ROCM_ARCH is {arch!r}; ROCm steps must JIT-build for {ROCM_ARCH!r} only"))
    return out


# ---- job-time variables must be escaped from upload-time interpolation

# Set per job by the agent, so unset when `buildkite-agent pipeline upload` interpolates.
JOB_VARS = (
    "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", "BUILDKITE_JOB_ID", "BUILDKITE_STEP_KEY",
    "BUILDKITE_STEP_ID", "BUILDKITE_RETRY_COUNT", "BUILDKITE_LABEL", "BUILDKITE_AGENT_NAME",
    "BUILDKITE_AGENT_ID", "BUILDKITE_BUILD_CHECKOUT_PATH", "BUILDKITE_ARTIFACT_PATHS", "BUILDKITE_COMMAND",
    "BUILDKITE_TIMEOUT",
)
_UPLOAD_VAR = re.compile(r"(?<!\$)\$\{?(" + "|".join(JOB_VARS) + r")\b")


def job_variables(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for s in pipeline.command_steps:
        for c in s.commands:
            for m in _UPLOAD_VAR.finditer(c):
                out.append(_p(pipeline, s, "interpolation",
                              f"command uses ${m.group(1)}, which pipeline upload replaces with an empty string; write $${m.group(1)}"))
    return out


# ---- parallel jobs must not overwrite each other's JUnit file

_JUNIT = re.compile(r"--junit-?xml[= ](\S+)")


def parallel_junit(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for s in pipeline.command_steps:
        if s.parallelism < 2:
            continue
        for c in s.commands:
            for m in _JUNIT.finditer(c):
                if "BUILDKITE_PARALLEL_JOB" not in m.group(1):
                    out.append(_p(pipeline, s, "parallel-junit",
                                  f"parallelism {s.parallelism} but every job writes {m.group(1)}; put $$BUILDKITE_PARALLEL_JOB in the name"))
    return out


# ---- every kernel file is compiled ahead of time for every target (per-change pipeline)

PER_CHANGE_PROFILE = "ci"  # top-level env HARNESS_PROFILE of the pipeline that runs on every change


def _targets_commands(command: str) -> list[dict]:
    """`moe-harness targets` invocations in one command: their --targets and --kernels (None = all)."""
    words = shlex.split(command, comments=True)
    found = []
    for i, w in enumerate(words[:-1]):
        if w.endswith("moe-harness") and words[i + 1] == "targets":
            opts = {"targets": None, "kernels": None}
            rest = words[i + 2:]
            for j, a in enumerate(rest):
                for name in opts:
                    if a == f"--{name}" and j + 1 < len(rest):
                        opts[name] = [x for x in rest[j + 1].split(",") if x]
                    elif a.startswith(f"--{name}="):
                        opts[name] = [x for x in a.split("=", 1)[1].split(",") if x]
            found.append(opts)
    return found


def targets_step(pipeline: Pipeline, root: Path) -> list[Problem]:
    if pipeline.env.get("HARNESS_PROFILE") != PER_CHANGE_PROFILE:
        return []
    import fnmatch

    from harness.aot.inventory import kernel_files  # AST only; no triton
    from harness.aot.compile import TARGETS

    files = kernel_files(root)
    if not files:
        return []
    runs = []
    for s in pipeline.command_steps:
        if target_of(s.queue) != "cpu":
            continue
        for c in s.commands:
            try:
                runs.extend(_targets_commands(c))
            except ValueError:
                continue  # referenced_files reports bad shell
    out = []
    for path, names in files.items():
        for name in names:
            missing = [t for t in TARGETS if not any(
                (r["targets"] is None or t in r["targets"])
                and (r["kernels"] is None or any(fnmatch.fnmatchcase(name, p) for p in r["kernels"]))
                for r in runs)]
            if missing:
                out.append(_p(pipeline, None, "targets",
                              f"{path} defines Triton kernel {name}, but no cpu step runs `moe-harness targets` "
                              f"over it for {', '.join(missing)}"))
    return out


LINTS = {
    "required-fields": required_fields,
    "retry": retry_policy,
    "soft-fail": soft_fail_reason,
    "depends-on": dependencies,
    "files": referenced_files,
    "lm-eval": lm_eval_configs,
    "rocm-parity": rocm_parity,
    "rocm-arch": rocm_arch,
    "interpolation": job_variables,
    "parallel-junit": parallel_junit,
    "targets": targets_step,
}


def lint(pipeline: Pipeline, root: Path) -> list[Problem]:
    out = []
    for fn in LINTS.values():
        out.extend(fn(pipeline, Path(root)))
    return out
