"""Every lint on CUDA and on ROCm steps alike, each with the value missing
entirely and with it present but wrong (vLLM #46254's lm_eval.yaml had
a ROCm step with no PYTORCH_ROCM_ARCH at all, which a wrong-value fixture alone
never exercised)."""

import copy
from pathlib import Path

import pytest
import yaml

from harness.pipelines import lints, model, schema

LINT_DIR = Path(__file__).parent / "fixtures" / "lint"  # has scripts/check.sh, configs/tiny-bf16.yaml, checks/
RETRY_GPU = {"automatic": [{"exit_status": -1, "limit": 2}, {"exit_status": 255, "limit": 2},
                           {"exit_status": 124, "limit": 1}]}


def gpu_step(target: str) -> dict:
    queue = {"cuda": "cuda-h100", "rocm": "rocm-mi300x"}[target]
    step = {"label": f"{target}-kernels", "key": f"{target}-kernels", "agents": {"queue": queue},
            "timeout_in_minutes": 10, "artifact_paths": ["reports/**/*"], "retry": copy.deepcopy(RETRY_GPU),
            "command": [f"timeout 5m bash scripts/check.sh --junitxml=reports/junit/{target}-k.xml"], "env": {}}
    if target == "rocm":
        step["env"]["PYTORCH_ROCM_ARCH"] = "gfx942"
    return step


def pipeline(exempt=True) -> dict:
    cuda, rocm = gpu_step("cuda"), gpu_step("rocm")
    if exempt:  # the two steps are judged on their own (parity has its own tests below)
        cuda["env"]["HARNESS_ROCM_EXEMPT"] = "fixture: each step judged alone"
    return {"steps": [cuda, rocm]}


def findings(doc, tmp_path) -> set[tuple[str, str]]:
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    p = model.load(path)
    assert schema.validate(p) == [], "the fixture must be schema-valid: the lint, not the schema, must catch it"
    return {(prob.where, prob.check, prob.message) for prob in lints.lint(p, LINT_DIR)}


def _cmd(step, text):
    step["command"] = [text]


# rule -> {variant: (mutation of one step, text the finding must hold)}
MUTATIONS = {
    "required-fields": {
        "key missing": (lambda s: s.pop("key"), "key: missing"),
        "label missing": (lambda s: s.pop("label"), "label: missing"),
        "label wrong (empty)": (lambda s: s.update(label=""), "label: missing"),
        "timeout missing": (lambda s: s.pop("timeout_in_minutes"), "timeout_in_minutes: missing"),
        "queue missing": (lambda s: s.pop("agents"), "agents.queue: missing"),
        "queue wrong": (lambda s: s.update(agents={"queue": "gpu-big"}), "'gpu-big' is not a known queue"),
        "artifacts missing": (lambda s: s.pop("artifact_paths"), "artifact_paths: missing"),
        "command wrong (empty)": (lambda s: s.update(command=[]), "command: missing"),
        "parallelism wrong": (lambda s: s.update(parallelism=0), "parallelism: 0; must be an integer >= 1"),
    },
    "retry": {
        "retry missing": (lambda s: s.pop("retry"), "no rule for exit status [-1, 255, 124]"),
        "hang retry missing": (lambda s: s["retry"]["automatic"].pop(), "no rule for exit status [124]"),
        "retry wrong (limit 0)": (lambda s: s["retry"]["automatic"][2].update(limit=0), "[124]"),
    },
    "soft-fail": {
        "reason missing": (lambda s: s.update(soft_fail=True), "soft_fail without a reason"),
        "reason wrong (blank)": (lambda s: s.update(soft_fail=True, env={**s["env"], "HARNESS_SOFT_FAIL_REASON": " "}),
                                 "soft_fail without a reason"),
    },
    "depends-on": {
        "dependency missing": (lambda s: s.update(depends_on="nope"), "no step has key 'nope'"),
        "dependency wrong (itself)": (lambda s: s.update(depends_on=s["key"]), "cycle"),
    },
    "files": {
        "script missing": (lambda s: _cmd(s, "timeout 5m bash scripts/nope.sh"), "'scripts/nope.sh', which does not exist"),
        "glob wrong": (lambda s: _cmd(s, "timeout 5m cat configs/*.json"), "'configs/*.json', which matches no file"),
    },
    "lm-eval": {
        "config missing": (lambda s: _cmd(s, "timeout 5m .venv/bin/moe-harness eval --limit 3"), "without --config"),
        "config wrong": (lambda s: _cmd(s, "timeout 5m .venv/bin/moe-harness eval --config configs/nope.yaml"),
                         "'configs/nope.yaml' does not exist"),
    },
    "interpolation": {
        "$VAR form": (lambda s: _cmd(s, "echo $BUILDKITE_PARALLEL_JOB"), "write $$BUILDKITE_PARALLEL_JOB"),
        "${VAR} form": (lambda s: _cmd(s, "echo ${BUILDKITE_PARALLEL_JOB}"), "write $$BUILDKITE_PARALLEL_JOB"),
        "${VAR:-default} form": (lambda s: _cmd(s, "echo ${BUILDKITE_JOB_ID:-0}"), "write $$BUILDKITE_JOB_ID"),
    },
    "parallel-junit": {
        "job index missing": (lambda s: s.update(parallelism=2), "every job writes reports/junit/"),
        "job index wrong": (lambda s: s.update(parallelism=2, command=[
            "timeout 5m bash scripts/check.sh --junitxml=reports/junit/k-$$BUILDKITE_JOB_ID.xml"]),
            "every job writes reports/junit/k-$$BUILDKITE_JOB_ID.xml"),
    },
}
CASES = [(rule, variant, target) for rule, vs in MUTATIONS.items() for variant in vs for target in ("cuda", "rocm")]


def test_every_lint_is_exercised_here_or_below():
    # "targets" is pipeline-level (a step that covers every kernel file), not a
    # per-step rule: its fixtures are targets_step_*.yml in test_lints.py
    assert set(MUTATIONS) | {"rocm-parity", "rocm-arch", "targets"} == set(lints.LINTS)


@pytest.mark.parametrize("rule,variant,target", CASES, ids=[f"{r}-{v}-{t}" for r, v, t in CASES])
def test_rule_fires_on_the_mutated_step_of_either_target(tmp_path, rule, variant, target):
    doc = pipeline()
    assert findings(doc, tmp_path) == set()
    index = 0 if target == "cuda" else 1
    mutate, text = MUTATIONS[rule][variant]
    mutate(doc["steps"][index])
    found = findings(doc, tmp_path)
    assert found, f"{rule} did not fire on the {target} step"
    assert {(where.split(" ")[0], check) for where, check, _ in found} == {(f"steps[{index}]", rule)}, found
    assert any(text in msg for _, _, msg in found), found


# ---- ROCm arch: missing entirely (step and pipeline level) as well as wrong

@pytest.mark.parametrize("step_env,pipeline_env,expect", [
    (None, None, "is not set"),                        # vLLM #46254: no PYTORCH_ROCM_ARCH anywhere
    (None, {"OTHER": "1"}, "is not set"),
    ("gfx90a", None, "'gfx90a'"),
    (None, "gfx90a", "'gfx90a'"),                      # wrong at pipeline level
    ("gfx90a", "gfx942", "'gfx90a'"),                  # the step's wrong value wins over the pipeline's right one
    ("", None, "''"),
    ("gfx942;gfx90a", None, "'gfx942;gfx90a'"),
    (None, "gfx942", None),                            # right at pipeline level only: fine
    ("gfx942", None, None),
])
def test_rocm_arch_missing_or_wrong(tmp_path, step_env, pipeline_env, expect):
    doc = pipeline()
    rocm = doc["steps"][1]
    rocm["env"].pop("PYTORCH_ROCM_ARCH")
    if step_env is not None:
        rocm["env"]["PYTORCH_ROCM_ARCH"] = step_env
    if isinstance(pipeline_env, dict):
        doc["env"] = pipeline_env
    elif pipeline_env is not None:
        doc["env"] = {"PYTORCH_ROCM_ARCH": pipeline_env}
    found = findings(doc, tmp_path)
    if expect is None:
        assert found == set()
    else:
        assert {(w, c) for w, c, _ in found} == {("steps[1] (rocm-kernels)", "rocm-arch")}, found
        assert any(expect in m for _, _, m in found), found


def test_rocm_arch_does_not_apply_to_cuda_steps(tmp_path):
    doc = pipeline()
    doc["steps"][0]["env"]["PYTORCH_ROCM_ARCH"] = "gfx90a"   # meaningless on CUDA, not a finding
    assert findings(doc, tmp_path) == set()


# ---- ROCm parity: the CUDA side names the rule; its twin missing, wrong, or the reason blank

@pytest.mark.parametrize("mutate,text", [
    (lambda d: d["steps"].pop(1), "no ROCm step 'rocm-kernels'"),                       # twin missing
    (lambda d: d["steps"][1]["agents"].update(queue="cuda-h100"), "no ROCm step 'rocm-kernels'"),  # twin on CUDA
    (lambda d: _cmd(d["steps"][1], "timeout 5m bash scripts/check.sh"), "runs different commands"),
    (lambda d: d["steps"][0]["env"].update(HARNESS_ROCM_EXEMPT=""), "HARNESS_ROCM_EXEMPT is empty"),
    (lambda d: d["steps"][0].update(key="gpu-kernels"), "does not name its target"),
])
def test_rocm_parity_missing_or_wrong(tmp_path, mutate, text):
    doc = pipeline(exempt=False)
    assert findings(doc, tmp_path) == set()
    mutate(doc)
    found = findings(doc, tmp_path)
    assert {c for _, c, _ in found} == {"rocm-parity"}, found
    assert any(w.startswith("steps[0]") and text in m for w, _, m in found), found
