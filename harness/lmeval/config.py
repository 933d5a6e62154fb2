"""Accuracy configs (suites/lm_eval/configs/*.yaml).

A config in vLLM's lm-eval format loads unchanged:

    model_name: "mistralai/Mixtral-8x7B-Instruct-v0.1"
    tasks:
      - name: "gsm8k"
        metrics:
          - name: "exact_match,strict-match"
            value: 0.616
    limit: 250            # optional: items per task, or a fraction 0 < limit < 1 of them
    num_fewshot: 5        # optional
    rtol: 0.08            # optional (vLLM's default tolerance)

Other vLLM keys (max_model_len, batch_size, gen_kwargs, env_vars, ...) are
accepted and kept (docs/lm_eval.md says which the harness applies); an
unknown top-level key is an error with the nearest known key (a typo'd
`limt:` would otherwise run every item). A key written twice is a warning
naming both lines (vLLM's reader keeps the last; so do we). The harness adds
one optional mapping, `harness:` (unknown keys in it are errors), with the
scheme, the baseline scheme, model location and gates.

Without `harness.scheme` (vLLM's configs) the scheme is the checkpoint's own
(its config.json `quantization_config`, identified by harness.checkpoints
when the run starts); a float model with no scheme is refused: every gate
would compare bf16 with bf16. A model that is not a local folder is looked
up in the local Hugging Face hub cache; absent there it is an error unless
the config (`harness.model_optional: true`) or `eval --model-optional` marks
it optional (then the run is SKIPPED).
Every error names the file and the field. Every number must be finite and
in its range: a NaN compares false with everything and would disable a gate.
The file is read by harness.util.safe_yaml (size, depth, node and alias limits).
Nothing here imports torch or lm-eval: `eval --dry-run` stays fast.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import reprlib
from dataclasses import dataclass, field
from pathlib import Path

from harness.util import devices
from harness.util import offline, safe_yaml

from harness.checkpoints import detect, producers
from harness.lmeval import task_data, task_names
from harness.lmeval.configs import tiny_config_path
from harness.models import tiny_families, tiny_model
from harness.models.tiny_model import BUNDLED_MODEL_NAME
from harness.lmeval.schemes import DTYPES, EXPERT_BACKENDS, SCHEMES

DEFAULT_RTOL = 0.08
VLLM_KEYS = {
    "model_name", "tasks", "limit", "num_fewshot", "rtol", "max_model_len", "trust_remote_code",
    "batch_size", "backend", "gen_kwargs", "apply_chat_template", "fewshot_as_multiturn", "add_bos_token",
    "enforce_eager", "kv_cache_dtype", "tensor_parallel_size", "enable_thinking", "chat_template_args",
    "max_num_seqs", "env", "model_args", "dtype", "quantization", "seed",
    # read by vLLM's test driver (.buildkite/lm-eval-harness/test_lm_eval_correctness.py):
    "env_vars", "moe_backend", "required_gpu_arch", "tokenizer_mode", "rocm_safetensors_load_strategy",
    "attention_backend", "jit_monitor_mode",
}
# The vLLM keys a harness run applies; the rest configure vLLM's engine (moe_backend,
# tokenizer_mode, env_vars, ...) and are recorded in the plan, not applied.
VLLM_APPLIED = ("model_name", "tasks", "limit", "num_fewshot", "rtol", "batch_size")
HARNESS_KEYS = {"scheme", "baseline_scheme", "backend", "dtype", "device", "parallelize", "batch_size", "model_dir",
                "model_dir_env", "model_subdir", "model_optional", "calibration", "gates", "seed", "description",
                "checkpoint"}
GATE_KEYS = {"one_sided", "paired", "kl"}
PAIRED_KEYS = {"allowance", "allowances", "confidence", "method", "resamples", "seed", "metrics"}
KL_KEYS = {"task", "max", "docs", "oracle_max"}
CALIB_KEYS = {"docs", "seed"}

# Ranges of the numeric fields (inclusive). Seeds go to numpy, which takes < 2**32.
SEED_MAX = 2**32 - 1
MAX_RESAMPLES = 10**6        # 10**13 once tried to allocate 1.42 PiB
MAX_ITEMS = 10**9            # limit / docs: more items than any task has
MAX_BATCH = 65536
MAX_FEWSHOT = 1000
MAX_TASKS = 1000
MAX_METRICS = 100


class ConfigError(ValueError):
    def __init__(self, path, fld: str, problem: str):
        super().__init__(f"{path}: {fld}: {problem}")
        self.path, self.field, self.problem = str(path), fld, problem


@dataclass
class MetricSpec:
    name: str          # as lm-eval reports it: "metric,filter"
    value: float | None


@dataclass
class TaskSpec:
    name: str
    metrics: list[MetricSpec]


@dataclass
class PairedSpec:
    allowance: float = 0.03
    confidence: float = 0.95
    method: str = "bootstrap"
    resamples: int = 2000
    seed: int = 0
    metrics: list[str] | None = None   # "task:metric"; default: every 0/1 accuracy metric
    allowances: dict = field(default_factory=dict)  # "task:metric" -> allowance (overrides `allowance`)

    def allowance_for(self, task: str, metric: str) -> float:
        return self.allowances.get(f"{task}:{metric}", self.allowance)


@dataclass
class KLSpec:
    task: str | None = None
    max: float | None = None
    docs: int | None = None
    oracle: bool = False             # also measure KL(float64 reference of the scheme || scheme)
    oracle_max: float | None = None


@dataclass
class AccuracyConfig:
    path: str
    model_name: str
    tasks: list[TaskSpec]
    rtol: float = DEFAULT_RTOL
    limit: int | float | None = None    # items per task, or a fraction (0 < limit < 1)
    num_fewshot: int | None = None
    scheme: str | None = None
    baseline_scheme: str = "bf16"
    backend: str = "unfused"
    dtype: str = "auto"
    device: str | None = None
    parallelize: bool = False          # layers over the host's GPUs (accelerate device_map)
    batch_size: int = 32
    model_dir: str | None = None
    model_dir_env: str | None = None
    model_subdir: str | None = None
    model_optional: bool = False       # absent model: SKIPPED (exit 0; 3 under HARNESS_REQUIRE_CHECKPOINT=1)
    calibration: dict = field(default_factory=dict)
    one_sided: bool = True
    paired: PairedSpec | None = field(default_factory=PairedSpec)
    kl: KLSpec | None = None
    seed: int = 0
    description: str = ""
    checkpoint: object = None           # CheckpointSpec: experts from a producer checkpoint
    vllm_extra: dict = field(default_factory=dict)
    include_paths: list = field(default_factory=list)   # task folders added by `eval --include-path`
    task_map: dict = field(default_factory=dict)    # stand-in -> the config's task it replaces (`eval --task-map`)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # facts about valid input (tasks not bundled)

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]


CHECKPOINT_KEYS = {"format", "producer", "producer_scheme", "subdir"}


@dataclass(frozen=True)
class CheckpointSpec:
    format: str
    producer: str | None = None
    producer_scheme: str | None = None
    subdir: str | None = None


def _parse_checkpoint(path, raw, scheme, model_dir_env, model_name=None) -> CheckpointSpec | None:
    """The `harness.checkpoint` section (see harness.lmeval.checkpoint_config)."""
    if raw is None:
        return None
    m = _mapping(path, "harness.checkpoint", raw, CHECKPOINT_KEYS)
    fmt = _str(path, "harness.checkpoint.format", m.get("format"))
    if fmt not in detect.FORMAT_NAMES:
        raise ConfigError(path, "harness.checkpoint.format", f"expected one of {', '.join(detect.FORMAT_NAMES)}, got {fmt!r}")
    spec = CheckpointSpec(fmt, *(_str(path, f"harness.checkpoint.{k}", m.get(k), allow_none=True)
                                 for k in ("producer", "producer_scheme", "subdir")))
    if (spec.producer is None) == (spec.subdir is None):
        raise ConfigError(path, "harness.checkpoint", "give either producer + producer_scheme (tiny model) or subdir")
    if spec.producer is not None:
        try:
            p = producers.get(spec.producer)
            want = producers.harness_scheme(spec.producer, spec.producer_scheme)
        except ValueError as e:
            raise ConfigError(path, "harness.checkpoint", str(e)) from None
        if p.fmt != fmt:
            raise ConfigError(path, "harness.checkpoint.format", f"{spec.producer} writes {p.fmt}, not {fmt}")
        if scheme != want:
            raise ConfigError(path, "harness.scheme", f"{spec.producer} {spec.producer_scheme} is evaluated as {want}, got {scheme}")
        if model_name is not None and model_name != p.model_name:
            raise ConfigError(path, "model_name", f"{p.model_name} (the float model {spec.producer} quantizes), "
                              f"got {model_name}")
    elif model_dir_env is None:
        raise ConfigError(path, "harness.checkpoint.subdir", "needs harness.model_dir_env (the folder holding it)")
    return spec


def _metric_name(name: str) -> str:
    return name if "," in name else f"{name},none"


def _num(path, fld, v, *, lo=None, hi=None, integer=False, allow_none=False):
    if v is None and allow_none:
        return None
    ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok_type:
        hint = ""
        if isinstance(v, str) and _float_text(v):
            hint = f" (YAML 1.1 reads {v} as text: write it with a dot, e.g. {_with_dot(v)})"
        raise ConfigError(path, fld, f"expected {'an integer' if integer else 'a number'}, got {_short(v)}{hint}")
    if not math.isfinite(v):
        raise ConfigError(path, fld, f"must be a finite number, got {_short(v)}")
    if lo is not None and v < lo:
        raise ConfigError(path, fld, f"must be >= {lo}, got {_short(v)}")
    if hi is not None and v > hi:
        raise ConfigError(path, fld, f"must be <= {hi}, got {_short(v)}")
    return v


def _float_text(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return "e" in v.lower() and "." not in v.lower().split("e")[0]


def _with_dot(v: str) -> str:
    mantissa, _, exp = v.lower().partition("e")
    return f"{mantissa}.0e{exp}"


def check_limit(path, fld, v):
    """lm-eval's `limit`: an item count (integer >= 1) or a fraction of the items (0 < limit < 1)."""
    if v is None:
        return None
    if isinstance(v, float) and not isinstance(v, bool) and math.isfinite(v) and not 0 < v < 1:
        raise ConfigError(path, fld, f"a fractional limit must be 0 < limit < 1 (an item count is an integer), got {_short(v)}")
    if isinstance(v, float):
        return _num(path, fld, v, lo=0)
    return _num(path, fld, v, lo=1, hi=MAX_ITEMS, integer=True)


def _str(path, fld, v, allow_none=False):
    if v is None and allow_none:
        return None
    if not isinstance(v, str) or not v:
        raise ConfigError(path, fld, f"expected a non-empty string, got {_short(v)}")
    return v


def _mapping(path, fld, v, allowed):
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(path, fld, f"expected a mapping, got {type(v).__name__}")
    extra = sorted(set(v) - allowed, key=str)
    if extra:
        raise ConfigError(path, f"{fld}.{_key(extra[0])}", f"unknown key{did_you_mean(extra[0], allowed)} "
                          f"(allowed: {', '.join(sorted(allowed))})")
    return v


def did_you_mean(key, known) -> str:
    """'; did you mean 'limit'?' for a near miss, else ''."""
    if not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _choice(path, fld, v, allowed, what, allow_none=False):
    if v is None and allow_none:
        return None
    if not isinstance(v, str) or v not in allowed:
        raise ConfigError(path, fld, f"unknown {what} {_short(v)}; known: {', '.join(allowed)}")
    return v


def _scheme(path, fld, v, allow_none=False):
    return _choice(path, fld, v, SCHEMES, "scheme", allow_none)


def _vllm_fields(path, data) -> None:
    """Types of the vLLM keys the harness reads or reports (the rest are vLLM's business)."""
    if "batch_size" in data and data["batch_size"] != "auto":
        _num(path, "batch_size", data["batch_size"], lo=1, hi=MAX_BATCH, integer=True)
    if "seed" in data:
        _num(path, "seed", data["seed"], lo=0, hi=SEED_MAX, integer=True)
    for key in ("max_model_len", "tensor_parallel_size", "max_num_seqs"):
        if key in data and data[key] is not None:
            _num(path, key, data[key], lo=1, hi=2**31 - 1, integer=True)
    env_vars = data.get("env_vars")
    if env_vars is not None and (not isinstance(env_vars, dict) or not all(isinstance(k, str) for k in env_vars)):
        raise ConfigError(path, "env_vars", f"expected a mapping NAME -> value, got {_short(env_vars)}")
    arch = data.get("required_gpu_arch")
    if arch is not None and (not isinstance(arch, list) or not all(isinstance(a, str) for a in arch)):
        raise ConfigError(path, "required_gpu_arch", f"expected a list of GPU arch names (gfx942, ...), got {_short(arch)}")
    for key in ("moe_backend", "tokenizer_mode", "rocm_safetensors_load_strategy"):
        if data.get(key) is not None:
            _str(path, key, data[key])


def parse(data, path="<config>") -> AccuracyConfig:
    if not isinstance(data, dict):
        raise ConfigError(path, "<top>", f"expected a mapping, got {type(data).__name__}")
    model_name = _str(path, "model_name", data.get("model_name"))
    raw_tasks = data.get("tasks")
    if "tasks" not in data:
        raise ConfigError(path, "tasks", "missing (a list of {name, metrics})")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise ConfigError(path, "tasks", f"expected a non-empty list, got {_short(raw_tasks)}")
    if len(raw_tasks) > MAX_TASKS:
        raise ConfigError(path, "tasks", f"{len(raw_tasks)} tasks; at most {MAX_TASKS}")
    tasks = []
    for i, t in enumerate(raw_tasks):
        if not isinstance(t, dict):
            raise ConfigError(path, f"tasks[{i}]", f"expected a mapping, got {_short(t)}")
        name = _str(path, f"tasks[{i}].name", t.get("name"))
        metrics_raw = t.get("metrics")
        if not isinstance(metrics_raw, list) or not metrics_raw:
            raise ConfigError(path, f"tasks[{i}].metrics", f"expected a non-empty list, got {_short(metrics_raw)}")
        if len(metrics_raw) > MAX_METRICS:
            raise ConfigError(path, f"tasks[{i}].metrics", f"{len(metrics_raw)} metrics; at most {MAX_METRICS}")
        metrics = []
        for j, m in enumerate(metrics_raw):
            fld = f"tasks[{i}].metrics[{j}]"
            if not isinstance(m, dict):
                raise ConfigError(path, fld, f"expected a mapping, got {_short(m)}")
            mname = _str(path, f"{fld}.name", m.get("name"))
            if "value" not in m:
                raise ConfigError(path, f"{fld}.value", "missing (use null to record without a reference)")
            value = _num(path, f"{fld}.value", m.get("value"), allow_none=True)
            metrics.append(MetricSpec(_metric_name(mname), value))
        tasks.append(TaskSpec(name, metrics))
    cfg = AccuracyConfig(
        path=str(path), model_name=model_name, tasks=tasks,
        rtol=_num(path, "rtol", data.get("rtol", DEFAULT_RTOL), lo=0, hi=1),
        limit=check_limit(path, "limit", data.get("limit")),
        num_fewshot=_num(path, "num_fewshot", data.get("num_fewshot"), lo=0, hi=MAX_FEWSHOT, integer=True,
                         allow_none=True),
    )
    _vllm_fields(path, data)
    for key in sorted(set(data) - VLLM_KEYS - {"harness"}, key=str):
        raise ConfigError(path, _key(key), f"unknown top-level key{did_you_mean(key, VLLM_KEYS | {'harness'})} "
                          "(vLLM's keys and `harness:` are known; docs/lm_eval.md lists them)")
    cfg.vllm_extra = {k: v for k, v in data.items() if k in VLLM_KEYS
                      and k not in ("model_name", "tasks", "limit", "num_fewshot", "rtol")}
    if "batch_size" in cfg.vllm_extra and isinstance(cfg.vllm_extra["batch_size"], int):
        cfg.batch_size = cfg.vllm_extra["batch_size"]
    h = _mapping(path, "harness", data.get("harness"), HARNESS_KEYS)
    cfg.scheme = _scheme(path, "harness.scheme", h.get("scheme"), allow_none=True)
    cfg.baseline_scheme = _scheme(path, "harness.baseline_scheme", h.get("baseline_scheme", "bf16"))
    cfg.backend = _choice(path, "harness.backend", h.get("backend", "unfused"), EXPERT_BACKENDS, "experts backend")
    cfg.dtype = _choice(path, "harness.dtype", h.get("dtype", "auto"), DTYPES, "dtype")
    cfg.device = _str(path, "harness.device", h.get("device"), allow_none=True)
    if cfg.device is not None:
        try:
            devices.check_name(cfg.device)
        except devices.DeviceError as e:
            raise ConfigError(path, "harness.device", str(e)) from None
    cfg.parallelize = h.get("parallelize", False)
    if not isinstance(cfg.parallelize, bool):
        raise ConfigError(path, "harness.parallelize", f"expected true or false, got {_short(cfg.parallelize)}")
    if cfg.parallelize and cfg.device is not None:
        raise ConfigError(path, "harness.parallelize", "true places the layers over the GPUs; drop harness.device")
    cfg.batch_size = _num(path, "harness.batch_size", h.get("batch_size", cfg.batch_size), lo=1, hi=MAX_BATCH,
                          integer=True)
    cfg.model_dir = _str(path, "harness.model_dir", h.get("model_dir"), allow_none=True)
    cfg.model_dir_env = _str(path, "harness.model_dir_env", h.get("model_dir_env"), allow_none=True)
    cfg.model_subdir = _str(path, "harness.model_subdir", h.get("model_subdir"), allow_none=True)
    cfg.model_optional = h.get("model_optional", False)
    if not isinstance(cfg.model_optional, bool):
        raise ConfigError(path, "harness.model_optional", f"expected true or false, got {_short(cfg.model_optional)}")
    cfg.seed = _num(path, "harness.seed", h.get("seed", 0), integer=True, lo=0, hi=SEED_MAX)
    cfg.description = h.get("description", "") or ""
    if not isinstance(cfg.description, str):
        raise ConfigError(path, "harness.description", f"expected a string, got {_short(cfg.description)}")
    calib = _mapping(path, "harness.calibration", h.get("calibration"), CALIB_KEYS)
    cfg.calibration = {k: _num(path, f"harness.calibration.{k}", v, integer=True, lo=0 if k == "seed" else 1,
                               hi=SEED_MAX if k == "seed" else MAX_ITEMS) for k, v in calib.items()}
    gates = _mapping(path, "harness.gates", h.get("gates"), GATE_KEYS)
    one = gates.get("one_sided", True)
    if not isinstance(one, bool):
        raise ConfigError(path, "harness.gates.one_sided", f"expected true/false, got {_short(one)}")
    cfg.one_sided = one
    cfg.paired = _parse_paired(path, gates.get("paired", {}))
    _check_paired_names(path, cfg)
    cfg.kl = _parse_kl(path, gates.get("kl"), cfg)
    if "checkpoint" in h:
        cfg.checkpoint = _parse_checkpoint(path, h["checkpoint"], cfg.scheme, cfg.model_dir_env, cfg.model_name)
    return cfg


def _check_paired_names(path, cfg: AccuracyConfig) -> None:
    """A misspelt 'task:metric' would leave an allowance unused or gate nothing: refuse it."""
    if cfg.paired is None:
        return
    fld = "harness.gates.paired"
    configured = {f"{t.name}:{m.name}" for t in cfg.tasks for m in t.metrics}
    for m in cfg.paired.metrics or []:
        if m.split(":", 1)[0] not in cfg.task_names:
            raise ConfigError(path, f"{fld}.metrics", f"{_short(m)} names no task of the config {cfg.task_names}")
    for key in cfg.paired.allowances:
        if key not in configured and key not in (cfg.paired.metrics or []):
            raise ConfigError(path, f"{fld}.allowances.{_key(key)}",
                              f"not a 'task:metric' of the config ({', '.join(sorted(configured))})")


def _parse_paired(path, raw) -> PairedSpec | None:
    if raw is False:
        return None
    p = _mapping(path, "harness.gates.paired", raw, PAIRED_KEYS)
    spec = PairedSpec()
    fld = "harness.gates.paired"
    if "allowance" in p:
        spec.allowance = _num(path, f"{fld}.allowance", p["allowance"], lo=0, hi=1)
    if "allowances" in p:
        raw_a = p["allowances"]
        if not isinstance(raw_a, dict):
            raise ConfigError(path, f"{fld}.allowances", "expected a mapping 'task:metric' -> number")
        for key, v in raw_a.items():
            if not isinstance(key, str) or ":" not in key:
                raise ConfigError(path, f"{fld}.allowances", f"key {_short(key)} is not 'task:metric'")
            task, metric = key.split(":", 1)
            spec.allowances[f"{task}:{_metric_name(metric)}"] = _num(path, f"{fld}.allowances.{_key(key)}", v, lo=0, hi=1)
    if "confidence" in p:
        spec.confidence = _num(path, f"{fld}.confidence", p["confidence"], lo=0.5, hi=0.9999)
    if "method" in p:
        if p["method"] not in ("bootstrap", "mcnemar"):
            raise ConfigError(path, f"{fld}.method", f"expected bootstrap|mcnemar, got {_short(p['method'])}")
        spec.method = p["method"]
    if "resamples" in p:
        spec.resamples = _num(path, f"{fld}.resamples", p["resamples"], lo=100, hi=MAX_RESAMPLES, integer=True)
    if "seed" in p:
        spec.seed = _num(path, f"{fld}.seed", p["seed"], lo=0, hi=SEED_MAX, integer=True)
    if "metrics" in p:
        if not isinstance(p["metrics"], list) or not all(isinstance(m, str) and ":" in m for m in p["metrics"]):
            raise ConfigError(path, f"{fld}.metrics", "expected a list of 'task:metric' strings")
        spec.metrics = [f"{m.split(':', 1)[0]}:{_metric_name(m.split(':', 1)[1])}" for m in p["metrics"]]
    return spec


def _parse_kl(path, raw, cfg: AccuracyConfig) -> KLSpec | None:
    if raw in (None, False):
        return None
    k = _mapping(path, "harness.gates.kl", raw, KL_KEYS)
    task = _str(path, "harness.gates.kl.task", k.get("task"))
    if task not in cfg.task_names:
        raise ConfigError(path, "harness.gates.kl.task", f"{_short(task)} is not one of the config's tasks {cfg.task_names}")
    return KLSpec(task=task, max=_num(path, "harness.gates.kl.max", k.get("max"), lo=0, allow_none=True),
                  docs=_num(path, "harness.gates.kl.docs", k.get("docs"), lo=1, hi=MAX_ITEMS, integer=True,
                            allow_none=True),
                  oracle="oracle_max" in k,
                  oracle_max=_num(path, "harness.gates.kl.oracle_max", k.get("oracle_max"), lo=0, allow_none=True))


def load(path, include_paths=(), task_map=None) -> AccuracyConfig:
    try:
        loaded = safe_yaml.load(path, duplicates="warn")
    except safe_yaml.YAMLInputError as e:
        raise ConfigError(e.path, e.part, e.problem) from None
    cfg = parse(loaded.data, path)
    cfg.warnings[:0] = loaded.warnings
    cfg.include_paths = [str(p) for p in include_paths]
    apply_task_map(cfg, task_map or {})
    check_tasks(cfg)
    return cfg


def parse_task_map(items) -> dict[str, str]:
    """`--task-map NAME=TASK` (repeatable) -> {NAME: TASK}."""
    out: dict[str, str] = {}
    for text in items or ():
        name, sep, standin = str(text).partition("=")
        name, standin = name.strip(), standin.strip()
        if not sep or not name or not standin:
            raise ConfigError("--task-map", _short(text), "expected NAME=TASK (the config's task = the task to run "
                              f"instead), e.g. {', '.join(f'{k}={v}' for k, v in task_names.STAND_INS.items())}")
        if name in out:
            raise ConfigError("--task-map", text, f"{name} is mapped twice ({name}={out[name]})")
        out[name] = standin
    return out


def apply_task_map(cfg: AccuracyConfig, mapping: dict[str, str]) -> None:
    """Run the config's task NAME as the task TASK (a bundled stand-in such as
    tiny_add_gsm for gsm8k): the task is renamed, so every result and report
    names what ran; the config's reference values were measured on NAME, so
    they are recorded, not gated (the paired gate against the baseline needs
    none). The stand-in must report every metric the config names."""
    for name, standin in mapping.items():
        flag = f"{name}={standin}"
        idx = [i for i, t in enumerate(cfg.tasks) if t.name == name]
        if not idx:
            raise ConfigError("--task-map", flag, f"{name} is not a task of {cfg.path} ({', '.join(cfg.task_names)})")
        if standin in cfg.task_names:
            raise ConfigError("--task-map", flag, f"{standin} is already a task of {cfg.path}")
        named = _gate_task_names(cfg)
        if name in named:
            raise ConfigError("--task-map", flag, f"{cfg.path}'s harness.gates name {name} ({named[name]}): "
                              "map only tasks the gates do not name")
        if standin not in task_names.bundled() and not task_data.find(standin, cfg.include_paths):
            known = ", ".join(sorted(task_names.bundled()))
            raise ConfigError("--task-map", flag, f"unknown task {standin}: not a bundled task ({known}), not in an "
                              f"--include-path folder, not in lm-eval's registry{did_you_mean(standin, task_names.bundled())}")
        reported = task_data.reported_metrics(standin, cfg.include_paths)
        i = idx[0]
        for j, m in enumerate(cfg.tasks[i].metrics):
            if reported is not None and m.name not in reported:
                raise ConfigError("--task-map", flag, f"{standin} reports {', '.join(sorted(reported))}, not "
                                  f"{m.name} ({cfg.path} tasks[{i}].metrics[{j}])")
        values = [f"{m.name} {m.value:g}" for m in cfg.tasks[i].metrics if m.value is not None]
        cfg.tasks[i] = TaskSpec(standin, [MetricSpec(m.name, None) for m in cfg.tasks[i].metrics])
        cfg.task_map[standin] = name
        cfg.notes.append(f"{cfg.path}: tasks[{i}].name: {name} runs as {standin} (--task-map)"
                         + (f"; the config's values ({', '.join(values)}) were written for {name}: recorded, "
                            "not gated" if values else ""))


def _gate_task_names(cfg: AccuracyConfig) -> dict[str, str]:
    """Task name -> the harness.gates field that names it."""
    out = {}
    if cfg.kl is not None and cfg.kl.task:
        out[cfg.kl.task] = "kl.task"
    if cfg.paired is not None:
        for key in list(cfg.paired.metrics or []) + list(cfg.paired.allowances):
            out.setdefault(key.split(":", 1)[0], "paired")
    return out


def check_tasks(cfg: AccuracyConfig) -> None:
    """Task names against the bundled tasks, the --include-path folders and
    lm-eval's task registry (harness.lmeval.task_data). A name none knows is
    an error (with the nearest known name); check_task_data then says whether
    each task's data is on this machine."""
    local = task_names.bundled()
    for i, t in enumerate(cfg.tasks):
        if t.name in local or task_data.find(t.name, cfg.include_paths):
            continue
        if task_names._registry_dir() is None:
            cfg.notes.append(f"{cfg.path}: tasks[{i}].name: {_short(t.name)} is not a bundled task and lm-eval is "
                             "not installed to check it")
            continue
        known = set(local) | {n for root in task_data.roots(cfg.include_paths) for n in task_data._index(root)}
        raise ConfigError(cfg.path, f"tasks[{i}].name", f"unknown task {_short(t.name)}{did_you_mean(t.name, known)}: "
                          "not a bundled task, not in an --include-path folder, not in lm-eval's task registry")


def check_task_data(cfg: AccuracyConfig) -> None:
    """Every task's data is on this machine (nothing is downloaded), or a
    ConfigError naming the task and how to provide its data."""
    local = task_names.bundled()
    for i, t in enumerate(cfg.tasks):
        if t.name in local and not cfg.include_paths:
            continue
        found = task_data.check(t.name, cfg.include_paths, hub_cache_dir())
        if found is None:
            continue  # lm-eval absent: check_tasks left a note
        missing = [d for d in found if not d.local]
        if missing:
            more = f" (and {len(missing) - 1} more of its {len(found)} tasks)" if len(missing) > 1 else ""
            what = missing[0].where if missing[0].task == t.name else f"its task {missing[0].task}: {missing[0].where}"
            standin = task_names.STAND_INS.get(t.name)
            alt = f"; or run the bundled stand-in task instead: --task-map {t.name}={standin}" if standin else ""
            raise ConfigError(cfg.path, f"tasks[{i}].name", f"{t.name}: data not on this machine: {what}{more}; "
                              + task_data.how_to_provide(missing[0]) + alt)


def _key(k) -> str:
    """A mapping key as it may appear in a one-line field name."""
    return k if isinstance(k, str) and k.isprintable() and len(k) <= 60 else _short(k)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 2, 4, 4, 60, 60


def _short(v, n: int = 60) -> str:
    """A bounded repr: a value built from shared aliases may be huge once printed."""
    text = _REPR.repr(v)
    return text if len(text) <= n else text[:n] + "..."


class ModelNotPresent(RuntimeError):
    """The model (or its checkpoint) is not on this machine. `optional`: the
    config or the command line marked it so, and the run is SKIPPED with this
    message; otherwise it is bad input (exit 2)."""

    def __init__(self, message: str, optional: bool = False):
        super().__init__(message)
        self.optional = optional


def hub_cache_dir() -> Path:
    """The user's Hugging Face hub cache (as huggingface_hub finds it), not
    the private cache harness.util.offline switches a run to."""
    return offline.user_hf_cache("hub")


def hub_snapshot(repo_id: str, kind: str = "models") -> Path | None:
    """The local snapshot of a hub repository (`org/name`) in the hub cache,
    or None. Read from the cache's own layout: refs/main names the snapshot."""
    if "/" not in repo_id or repo_id.startswith(("/", ".", "~")):
        return None
    repo = hub_cache_dir() / f"{kind}--{repo_id.replace('/', '--')}"
    snaps = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        folder = snaps / ref.read_text().strip()
        return folder if folder.is_dir() else None
    found = sorted(p for p in snaps.glob("*") if p.is_dir()) if snaps.is_dir() else []
    return found[0] if len(found) == 1 else None


def resolve_model_dir(cfg: AccuracyConfig, override: str | None = None, optional: bool = False) -> str:
    """The local folder to load, or ModelNotPresent naming what was looked
    for (optional when `optional` or harness.model_optional says so). Never
    downloads: a hub id resolves only to a snapshot already in the hub cache."""
    optional = optional or cfg.model_optional
    if override:
        if override == BUNDLED_MODEL_NAME:
            return str(tiny_model.bundled_dir())
        if override in tiny_families.MODEL_NAMES:  # made on first load (adapter)
            return str(tiny_families.folder(override))
        if not Path(override).is_dir():
            raise ModelNotPresent(f"--model {override}: no such folder")   # a flag naming nothing: never optional
        return override
    if cfg.model_dir:
        if not Path(cfg.model_dir).is_dir():
            raise ModelNotPresent(f"{cfg.path}: harness.model_dir {cfg.model_dir} does not exist", optional)
        return cfg.model_dir
    if cfg.model_name == BUNDLED_MODEL_NAME:
        return str(tiny_model.bundled_dir())
    if cfg.model_name in tiny_families.MODEL_NAMES:  # made on first load (adapter)
        return str(tiny_families.folder(cfg.model_name))
    if cfg.model_dir_env:
        root = os.environ.get(cfg.model_dir_env)
        sub = cfg.model_subdir or cfg.model_name.split("/")[-1]
        if not root:
            raise ModelNotPresent(f"{cfg.model_name}: ${cfg.model_dir_env} is not set; set it to the folder that "
                                  f"holds {sub}/ to run this config", optional)
        folder = Path(root) / sub
        if not (folder / "config.json").is_file():
            raise ModelNotPresent(f"{cfg.model_name}: no checkpoint at {folder} (config.json missing) "
                                  f"under ${cfg.model_dir_env}={root}", optional)
        return str(folder)
    if Path(cfg.model_name).is_dir():
        return cfg.model_name
    snapshot = hub_snapshot(cfg.model_name)
    if snapshot is not None:
        return str(snapshot)
    raise ModelNotPresent(f"{cfg.path}: model_name: {cfg.model_name} is not a local folder and not in the hub cache "
                          f"({hub_cache_dir()}); nothing is downloaded: pass --model DIR, or mark it optional "
                          "(--model-optional or harness.model_optional: true) to skip", optional)


def quantization_config(model_dir) -> dict | None:
    """config.json's quantization_config of a model folder (None: a float model)."""
    path = Path(model_dir) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    qc = data.get("quantization_config") if isinstance(data, dict) else None
    return qc if isinstance(qc, dict) and qc else None


# Where the scheme of a run comes from (the plan and the report say it).
FROM_FLAG, FROM_CONFIG, FROM_CHECKPOINT = "--scheme", "harness.scheme", "checkpoint"


def scheme_source(cfg: AccuracyConfig, override: str | None, model_dir: str | None) -> str:
    """FROM_FLAG, FROM_CONFIG or FROM_CHECKPOINT (the folder's quantization_config
    names it; harness.checkpoints reads it when the run starts). A float model
    with no scheme is a ConfigError: nothing would be quantized."""
    if override:
        return FROM_FLAG
    if cfg.scheme:
        return FROM_CONFIG
    if model_dir is None or quantization_config(model_dir) is not None:
        return FROM_CHECKPOINT
    raise ConfigError(cfg.path, "harness.scheme",
                      f"missing, and {model_dir} has no quantization_config (a float model): the run would compare "
                      f"bf16 with bf16 and quantize nothing; add `harness: {{scheme: S}}` or pass --scheme S "
                      f"(S one of {', '.join(SCHEMES[1:])})")


def thresholds_of(cfg: AccuracyConfig) -> list[str]:
    """The gate thresholds a config writes (they belong to its harness.scheme)."""
    out = [f"tasks {t.name} {m.name} value {m.value:g}" for t in cfg.tasks for m in t.metrics if m.value is not None]
    if cfg.paired is not None:
        out += [f"paired allowance {k} {v:g}" for k, v in sorted(cfg.paired.allowances.items())]
    if cfg.kl is not None and cfg.kl.max is not None:
        out.append(f"kl.max {cfg.kl.max:g}")
    return out


def check_scheme_override(cfg: AccuracyConfig, scheme: str | None, record_only: bool = False) -> None:
    """--scheme S on a config whose thresholds were written for another scheme
    would hold S to them (nvfp4's KL maximum applied to MXFP4): refused unless
    every gate is recorded only (--record-only)."""
    if scheme is None or cfg.scheme is None or scheme == cfg.scheme or record_only:
        return
    written = thresholds_of(cfg)
    if not written:
        return
    own = configs_for(scheme) if cfg.model_name == BUNDLED_MODEL_NAME else []
    hint = f"run {own[0]} (thresholds derived for {scheme})" if own else \
        f"write a config whose thresholds are derived for {scheme} (harness/lmeval/expected.py)"
    raise ConfigError("--scheme", scheme, f"{cfg.path}'s thresholds were written for {cfg.scheme} "
                      f"({written[0]}{', ...' if len(written) > 1 else ''}), not {scheme}: {hint}, or add "
                      "--record-only to record every measurement without gating")


def configs_for(scheme: str) -> list[str]:
    """Shipped configs of the bundled model whose harness.scheme is `scheme`."""
    path = tiny_config_path(scheme)
    return [str(path)] if path.is_file() else []
