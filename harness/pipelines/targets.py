"""Where steps run, and the conventions the pipelines and lints share.

Agent queues are named by target: `cpu`, `cuda-<gpu>` (H100/H200 agents
join `cuda-h100`), `rocm-<gpu>` (MI300X, gfx942, agents join `rocm-mi300x`).
Agents with two GPUs of one host join their own queues (MULTI_GPU_QUEUES), so
a two-GPU job never lands on a one-GPU agent.
"""

from __future__ import annotations

TARGETS = ("cpu", "cuda", "rocm")

# Two GPUs of one host (model parallel over a device_map, data parallel
# with accelerate launch): H200 x2 and MI300X x2 agents.
MULTI_GPU_QUEUES = {"cuda": "cuda-h200x2", "rocm": "rocm-mi300x2"}
MULTI_GPU_COUNT = 2

# ROCm JIT builds (Triton, torch extensions) must target the MI300X ISA only.
ROCM_ARCH = "gfx942"

# Exit statuses retried automatically (the YAML repeats why in comments):
LOST_AGENT = -1  # Buildkite lost the agent; Buildkite also reports a job killed at timeout_in_minutes as -1
AGENT_STOPPED = 255  # the agent was stopped (host drained, spot instance reclaimed)
GPU_HANG = 124  # our `timeout` watchdog fired: a GPU kernel hung (coreutils timeout exits 124)
RETRY_REQUIRED = {"all": (LOST_AGENT, AGENT_STOPPED), "gpu": (GPU_HANG,)}

# Step env keys that carry a written reason (env, because Buildkite keeps it and the lints can read it):
ROCM_EXEMPT_ENV = "HARNESS_ROCM_EXEMPT"  # on a CUDA step: why it has no ROCm twin
SOFT_FAIL_ENV = "HARNESS_SOFT_FAIL_REASON"  # on a soft_fail step: why a failure must not fail the build


def target_of(queue: str | None) -> str | None:
    if not queue:
        return None
    if queue == "cpu" or queue.startswith("cpu-"):
        return "cpu"
    for t in ("cuda", "rocm"):
        if queue.startswith(t + "-"):
            return t
    return None
