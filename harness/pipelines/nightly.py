"""buildkite/nightly.yml, generated: `moe-harness pipeline generate` writes it,
`moe-harness pipeline generate --check` (and suites/pipelines) fails when the
committed file differs.

The scheme list comes from the caller (the command passes the scheme table,
harness/moe/schemes.py), the real-checkpoint configs from the files
suites/lm_eval/configs/nightly-*.yaml and the tiny random family model
configs from suites/lm_eval/configs/tiny-<model_type>-<scheme>.yaml; this
module imports nothing of the numerics. Steps that are not one-per-scheme or one-per-config are the
declarative `Step` rows below (`EXTRA_STEPS` is where a new hand-maintained
nightly step goes). Buildkite `matrix` is not used: the local runner and the
lints read plain steps.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.pipelines.targets import MULTI_GPU_COUNT, MULTI_GPU_QUEUES, ROCM_ARCH, SOFT_FAIL_ENV

NIGHTLY_PATH = "buildkite/nightly.yml"
CONFIG_DIR = "suites/lm_eval/configs"
ARTIFACTS = '["reports/junit/*.xml", "reports/2*/**/*"]'
RETRY = {
    "cpu": ["{exit_status: -1, limit: 2}", "{exit_status: 255, limit: 2}"],
    "gpu": ["{exit_status: -1, limit: 2}", "{exit_status: 255, limit: 2}", "{exit_status: 124, limit: 1}"],
}
# GPU commands run under a `timeout` watchdog this many minutes below the step
# timeout, so a hung kernel exits 124 (retried once) instead of -1.
WATCHDOG_MARGIN_MIN = 10


@dataclass(frozen=True)
class Target:
    name: str  # cpu | cuda | rocm
    emoji: str
    queue: str
    env: tuple = ()  # (key, value) pairs every step of the target sets

    @property
    def retry(self) -> str:
        return "cpu" if self.name == "cpu" else "gpu"


CPU = Target("cpu", ":hypothesis:", "cpu")
CUDA = Target("cuda", ":nvidia:", "cuda-h100", (("HARNESS_TORCH_SPEC", "torch==2.11.0"),))
ROCM = Target("rocm", ":amd:", "rocm-mi300x",
              (("PYTORCH_ROCM_ARCH", ROCM_ARCH), ("HARNESS_TORCH_SPEC", "torch==2.11.0+rocm7.1")))
GPUS = (CUDA, ROCM)


@dataclass(frozen=True)
class Step:
    """One command step. GPU commands other than `make install` are wrapped
    in the watchdog; lines starting with '# ' are comments."""

    label: str
    key: str
    target: Target
    timeout: int
    commands: tuple
    parallelism: int | None = None
    agents: tuple = ()  # extra agent tags, (key, value)
    env: tuple = ()
    soft_fail_exit: int | None = None
    artifacts: str = ARTIFACTS


def _properties(t: Target, parallelism: int, timeout: int) -> Step:
    label = f"{t.emoji} properties ({t.name}, nightly profile) %n"
    junit = f"reports/junit/{t.name}-properties-nightly-$$BUILDKITE_PARALLEL_JOB.xml"
    return Step(label, f"{t.name}-properties-nightly", t, timeout,
                ("make install", f".venv/bin/python -m pytest suites/properties suites/regressions -p no:cacheprovider "
                                 f"--junitxml={junit}"), parallelism=parallelism)


def _conform(t: Target, timeout: int, device: str, comment: str | None = None) -> Step:
    cmds = ("make install",) + ((f"# {comment}",) if comment else ()) + (f".venv/bin/moe-harness conform --device {device}",)
    return Step(f":scales: conform ({t.name})", f"{t.name}-conform", t, timeout, cmds)


def _eval(t: Target, name: str, config: str, timeout: int, **kw) -> Step:
    return Step(f"{t.emoji} lm-eval {name} ({t.name})", f"{t.name}-eval-{name.replace(' ', '-')}", t, timeout,
                ("make install", f".venv/bin/moe-harness eval --config {CONFIG_DIR}/{config}"), **kw)


# Real checkpoints whose bf16 baseline needs more GPU memory than an H100:
# config-name prefix -> extra CUDA agent tags.
CUDA_AGENT_TAGS = {"nightly-mixtral-8x7b-": (("gpu", "h200"),)}
CHECKPOINT_SOFT_FAIL = ("exit 3 means the checkpoint is not on this agent: shown as a soft failure instead of a "
                        "silent pass; failed accuracy gates (exit 1) still fail")

CUDA_X2 = Target("cuda", ":nvidia:", MULTI_GPU_QUEUES["cuda"], CUDA.env)
ROCM_X2 = Target("rocm", ":amd:", MULTI_GPU_QUEUES["rocm"], ROCM.env)
SYNTH_DIR = "scratch/synth"  # in the job's checkout, removed before and after


def _multigpu(t: Target) -> tuple:
    """Two-GPU steps: the placement/equality suite, and the
    benchmark on synthetic real-size checkpoints: Qwen3-30B-A3B in all three
    modes, Mixtral-8x22B (more than one H200 holds) model parallel only; the
    fused backend (unfused dequantizes every expert of a layer each forward: at
    real size it ran past 160 s on a 16-generation workload)."""
    n = MULTI_GPU_COUNT
    suite = Step(f"{t.emoji} multi-GPU suite ({t.name} x{n})", f"{t.name}-multigpu-suite", t, 45,
                 ("make install", f".venv/bin/python -m pytest suites/multigpu -p no:cacheprovider "
                                  f"--junitxml=reports/junit/{t.name}-multigpu-suite.xml"))

    def bench(shape: str, modes: str, timeout: int) -> Step:
        return Step(f"{t.emoji} bench multigpu {shape} ({t.name} x{n})", f"{t.name}-multigpu-bench-{shape}", t,
                    timeout, ("make install", f"rm -rf {SYNTH_DIR}",
                              f".venv/bin/moe-harness checkpoint synth --shape {shape} --scheme nvfp4 --out {SYNTH_DIR}",
                              f".venv/bin/moe-harness bench multigpu --checkpoint {SYNTH_DIR} --gpus {n} --modes {modes} "
                              "--backend fused",
                              f"rm -rf {SYNTH_DIR}"))

    return (suite, bench("qwen3-30b-a3b", "single,model,data", 120), bench("mixtral-8x22b", "model", 150))


@dataclass(frozen=True)
class VllmRun:
    """One of vLLM's FP4 MoE lm-eval configs (suites/lm_eval/fixtures/vllm-<name>.yaml),
    run unchanged with --model pointing at a synthetic real-shape checkpoint
    of its family (`checkpoint synth`), gsm8k as the bundled stand-in. `shape`
    None: not run yet, `why` says what it waits for."""

    name: str
    shape: str | None
    scheme: str | None = None
    task_map: str = "gsm8k=tiny_add_gsm"
    why: str = ""

    @property
    def fixture(self) -> str:
        return f"suites/lm_eval/fixtures/vllm-{self.name}.yaml"


VLLM_RUNS = (
    VllmRun("Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b", "nvfp4"),
    VllmRun("Qwen3-30B-A3B-NVFP4", "qwen3-30b-a3b", "nvfp4"),
    # DeepSeek-R1 has DeepSeek-V3's shapes; the synthetic one has 5 of its 61 layers (3 dense + 2 MoE)
    VllmRun("DeepSeek-R1-NVFP4", "deepseek-v3-5layers", "nvfp4"),
    VllmRun("Llama-4-Scout-NVFP4", "llama-4-scout", "nvfp4"),
    VllmRun("gpt-oss-120b", "gpt-oss-120b", "mxfp4", task_map="aime25=tiny_add_gen"),
)
VLLM_LIMIT = 50  # items of the stand-in: the path at real size, not an accuracy


def _vllm(t: Target, run: VllmRun) -> Step:
    out = f"{SYNTH_DIR}-vllm"
    return Step(f"{t.emoji} vLLM config {run.name} on a synthetic {run.shape} ({t.name})",
                f"{t.name}-vllm-{run.name.lower().replace('.', '-')}", t, 90,
                ("make install", f"rm -rf {out}",
                 f".venv/bin/moe-harness checkpoint synth --shape {run.shape} --scheme {run.scheme} --out {out}",
                 f".venv/bin/moe-harness eval --config {run.fixture} --model {out} --task-map {run.task_map} "
                 f"--limit {VLLM_LIMIT}",
                 f"rm -rf {out}"))


# Hand-maintained nightly steps (not one per scheme or config): appended
# after the generated ones, before the report.
EXTRA_STEPS: tuple = (
    *_multigpu(CUDA_X2), *_multigpu(ROCM_X2),
    # Every row of the text-pattern fault table applied to a scratch copy, its
    # named tests shown red (make test checks the patterns and runs two rows).
    Step(":boom: fault injection, full sweep (cpu)", "cpu-fault-injection", CPU, 120,
         ("make install", ".venv/bin/python -m suites.fault_injection --json reports/fault-injection.json"),
         artifacts='["reports/fault-injection.json"]'),
)

HEADER = """\
# moe-harness: the nightly pipeline (a scheduled build; upload with
#   buildkite-agent pipeline upload buildkite/nightly.yml).
# GENERATED by `moe-harness pipeline generate` from the scheme table
# (harness/moe/schemes.py), suites/lm_eval/configs/nightly-*.yaml and
# suites/lm_eval/configs/tiny-<model_type>-<scheme>.yaml; edit
# harness/pipelines/nightly.py, not this file.
# Reproduce one step locally:
#   .venv/bin/moe-harness pipeline run buildkite/nightly.yml --target cuda --step cuda-eval-tiny-nvfp4
#
# Queues, retry exit statuses (-1 lost agent or step timeout, 255 agent
# stopped, 124 GPU-hang watchdog), the ROCm twin rule and the soft_fail rule
# are those of buildkite/pipeline.yml; see its header.
#
# What the nightly adds over the per-change pipeline:
#   - the hypothesis `nightly` profile (HARNESS_PROFILE=nightly: >= 2000
#     examples per property, nightly-marked tests enabled) on CPU and both GPUs;
#   - lm-eval on the bundled tiny MoE model for every scheme on both GPU targets;
#   - KL and certified-oracle gates on the tiny random DeepSeek-V3, Llama4 and
#     gpt-oss models (suites/lm_eval/configs/tiny-<model_type>-<scheme>.yaml);
#   - lm-eval on real checkpoints (suites/lm_eval/configs/nightly-*.yaml) on both GPU targets;
#   - vLLM's own FP4 MoE configs (suites/lm_eval/fixtures/vllm-*.yaml), unchanged, on a
#     synthetic real-shape checkpoint of their family, gsm8k as the stand-in tiny_add_gsm
#     (VLLM_RUNS in harness/pipelines/nightly.py says which wait for what).

env:
  PYTHONUNBUFFERED: "1"
  HARNESS_PROFILE: nightly

steps:
"""

CHECKPOINT_COMMENT = """\
  # Weights live on the GPU agents under $HARNESS_CHECKPOINT_DIR (an agent
  # setting); nothing is downloaded. HARNESS_REQUIRE_CHECKPOINT=1 makes
  # `moe-harness eval` exit 3 when they are missing, and exit 3 soft-fails:
  # visible on the build page, not a red nightly. An accuracy gate failing
  # (exit 1) fails the step. Mixtral-8x7B in bf16 needs ~94 GB, so on CUDA
  # it asks for an H200 agent (agent tag gpu=h200) of the cuda-h100 queue.
"""

REPORT = """\
  # ---------------------------------------------------------------- report
  # Runs even when steps above failed, so the build page shows what broke.
  - wait: ~
    continue_on_failure: true

  - label: ":junit: annotate"
    key: cpu-junit-annotate
    agents: {queue: cpu}
    timeout_in_minutes: 15
    command:
      - make install
      # Only this build's files: the download folder starts empty.
      - rm -rf reports/downloaded
      - buildkite-agent artifact download "reports/**/*.xml" reports/downloaded || echo "no JUnit artifacts to download"
      - .venv/bin/moe-harness pipeline junit-annotate "reports/downloaded/**/*.xml"
    artifact_paths: ["reports/2*/**/*"]
    retry: {automatic: *retry_cpu}
"""


def _scalar(v: str) -> str:
    return v if re.fullmatch(r"[A-Za-z][A-Za-z0-9_.]*", v) else json.dumps(v)


def _section(title: str) -> str:
    return f"  # {'-' * 64} {title}\n"


@dataclass
class _Writer:
    anchored: set = field(default_factory=set)
    out: list = field(default_factory=list)

    def step(self, s: Step) -> None:
        t = s.target
        agents = ", ".join(f"{k}: {v}" for k, v in (("queue", t.queue),) + s.agents)
        lines = [f"  - label: {json.dumps(s.label)}", f"    key: {s.key}", f"    agents: {{{agents}}}"]
        if s.parallelism:
            lines.append(f"    parallelism: {s.parallelism}")
        lines.append(f"    timeout_in_minutes: {s.timeout}")
        if s.soft_fail_exit is not None:
            lines += ["    soft_fail:", f"      - exit_status: {s.soft_fail_exit}"]
        env = t.env + s.env
        if env:
            lines.append("    env:")
            lines += [f"      {k}: {_scalar(v)}" for k, v in env]
        lines.append("    command:")
        for c in s.commands:
            if c.startswith("# "):
                lines.append(f"      {c}")
            elif t.name != "cpu" and not c.startswith("make install"):
                lines.append(f"      - timeout --kill-after=60 {s.timeout - WATCHDOG_MARGIN_MIN}m {c}")
            else:
                lines.append(f"      - {c}")
        lines.append(f"    artifact_paths: {s.artifacts}")
        kind = t.retry
        if kind in self.anchored:
            lines.append(f"    retry: {{automatic: *retry_{kind}}}")
        else:
            self.anchored.add(kind)
            lines += ["    retry:", f"      automatic: &retry_{kind}"] + [f"        - {r}" for r in RETRY[kind]]
        self.out.append("\n".join(lines) + "\n\n")


def checkpoint_configs(root: Path) -> list[str]:
    """File names of the real-checkpoint configs, sorted."""
    return sorted(p.name for p in (Path(root) / CONFIG_DIR).glob("nightly-*.yaml"))


def tiny_family_configs(root: Path) -> list[str]:
    """File names of the tiny family model configs (tiny-<model_type>-<scheme>.yaml:
    two dashes; a tiny-<scheme>.yaml has one, neither name holds another), sorted."""
    return sorted(p.name for p in (Path(root) / CONFIG_DIR).glob("tiny-*-*.yaml"))


def steps(schemes: Sequence[str], configs: Sequence[str], family_configs: Sequence[str] = ()) -> list:
    """(section title or None, Step) in file order."""
    rows = [("CPU", _properties(CPU, 8, 180)),
            (None, _conform(CPU, 30, "cpu", "every installed implementation held to the spec; exit 1 on a "
                                            "divergence the registry does not explain"))]
    for t in GPUS:
        rows.append((t.name.upper(), _properties(t, 4, 240)))
        rows += [(None, _eval(t, f"tiny {s}", f"tiny-{s}.yaml", 45)) for s in ("bf16", *schemes)]
        rows += [(None, _eval(t, c[:-len(".yaml")].replace("-", " ", 1), c, 45)) for c in family_configs]
    first = True
    for t in GPUS:
        for c in configs:
            tags = next((v for k, v in CUDA_AGENT_TAGS.items() if c.startswith(k)), ()) if t is CUDA else ()
            name = c[len("nightly-"):-len(".yaml")]
            step = _eval(t, name, c, 180, agents=tags, soft_fail_exit=3,
                         env=(("HARNESS_REQUIRE_CHECKPOINT", "1"), (SOFT_FAIL_ENV, CHECKPOINT_SOFT_FAIL)))
            rows.append(("real checkpoints (CUDA and ROCm)" if first else None, step))
            first = False
    first = True
    for t in GPUS:
        for run in VLLM_RUNS:
            if run.shape is not None:
                rows.append(("vLLM's configs on synthetic checkpoints (CUDA and ROCm)" if first else None, _vllm(t, run)))
                first = False
    rows += [(None, _conform(t, 45, "cuda")) for t in GPUS]
    rows += [(None, s) for s in EXTRA_STEPS]
    return rows


def render(schemes: Sequence[str], configs: Sequence[str], family_configs: Sequence[str] = ()) -> str:
    """The text of buildkite/nightly.yml."""
    w = _Writer()
    w.out.append(HEADER)
    for title, s in steps(schemes, configs, family_configs):
        if title:
            w.out.append(_section(title))
            if title.startswith("real checkpoints"):
                w.out.append(CHECKPOINT_COMMENT)
        w.step(s)
    w.out.append(REPORT)
    return "".join(w.out)
