"""Each lint, and the schema check, fires on a seeded mistake (fixtures/lint/*.yml) and only there."""

from pathlib import Path

import pytest

from harness.pipelines import lints, model, schema
from harness.commands import pipeline as command

LINT_DIR = Path(__file__).parent / "fixtures" / "lint"

# fixture -> (check that must fire, text its message must hold)
SEEDED = {
    "schema_bad_type.yml": ("schema", "steps[0] (cpu-unit): timeout_in_minutes: 'ten' is not of type 'integer'"),
    "missing_key.yml": ("required-fields", "key: missing"),
    "missing_timeout.yml": ("required-fields", "timeout_in_minutes: missing"),
    "missing_queue.yml": ("required-fields", "agents.queue: missing"),
    "unknown_queue.yml": ("required-fields", "'gpu-big' is not a known queue"),
    "empty_command.yml": ("required-fields", "command: missing"),
    "unknown_dependency.yml": ("depends-on", "no step has key 'cpu-nope'"),
    "dependency_cycle.yml": ("depends-on", "cycle: cpu-a -> cpu-b -> cpu-a"),
    "wait_cycle.yml": ("depends-on", "cycle"),
    "duplicate_key.yml": ("depends-on", "key 'cpu-a' is also used by steps[0]"),
    "missing_script.yml": ("files", "'scripts/nope.sh', which does not exist"),
    "missing_test_path.yml": ("files", "'checks/test_nope.py', which does not exist"),
    "missing_glob.yml": ("files", "'configs/*.json', which matches no file"),
    "missing_lm_eval_config.yml": ("lm-eval", "'configs/tiny-nvfp4.yaml' does not exist"),
    "lm_eval_without_config.yml": ("lm-eval", "without --config"),
    "cuda_without_rocm.yml": ("rocm-parity", "no ROCm step 'rocm-kernels'"),
    "empty_rocm_exemption.yml": ("rocm-parity", "HARNESS_ROCM_EXEMPT is empty"),
    "rocm_twin_differs.yml": ("rocm-parity", "runs different commands"),
    "rocm_without_arch.yml": ("rocm-arch", "'gfx90a'"),
    "soft_fail_without_reason.yml": ("soft-fail", "HARNESS_SOFT_FAIL_REASON"),
    "gpu_without_hang_retry.yml": ("retry", "[124]"),
    "no_retry.yml": ("retry", "[-1, 255]"),
    "job_var_not_escaped.yml": ("interpolation", "write $$BUILDKITE_PARALLEL_JOB"),
    "parallel_same_junit.yml": ("parallel-junit", "every job writes reports/junit/unit.xml"),
    "targets_step_missing.yml": ("targets", "harness/kernels/sample_kernels.py defines Triton kernel sample_kernel, "
                                            "but no cpu step runs `moe-harness targets` over it for gfx942, gfx950, "
                                            "sm_90, sm_100"),
    "targets_step_partial.yml": ("targets", "over it for gfx950, sm_100"),
}
# Checks about the whole pipeline rather than one step report "pipeline" as where.
PIPELINE_LEVEL = {"targets"}


def problems(name):
    p = model.load(LINT_DIR / name)
    return schema.validate(p) + lints.lint(p, LINT_DIR)


def test_baseline_fixture_is_clean():
    assert problems("good.yml") == []


def test_every_fixture_is_listed():
    on_disk = {p.name for p in LINT_DIR.glob("*.yml")} - {"good.yml"}
    assert on_disk == set(SEEDED)


def test_every_lint_has_a_seeded_fixture():
    assert {check for check, _ in SEEDED.values()} == set(lints.LINTS) | {"schema"}


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_seeded_mistake_fires_its_check(name):
    check, text = SEEDED[name]
    found = problems(name)
    assert found, f"{name}: no problem reported"
    assert {p.check for p in found} == {check}, [str(p) for p in found]
    assert any(text in str(p) for p in found), [str(p) for p in found]
    for p in found:  # "file: steps[i] (key): message"
        where = "pipeline:" if check in PIPELINE_LEVEL else "steps["
        assert str(p).startswith(f"{LINT_DIR / name}: {where}")


def test_validate_command_prints_file_step_and_message(capsys):
    rc = command.validate([str(LINT_DIR / "missing_script.yml"), str(LINT_DIR / "good.yml")], LINT_DIR)
    out = capsys.readouterr().out
    assert rc == 1
    assert f"{LINT_DIR / 'missing_script.yml'}: steps[0] (cpu-unit): command names 'scripts/nope.sh'" in out
    assert f"ok {LINT_DIR / 'good.yml'}" in out


def test_unreadable_and_non_yaml_files_are_clear_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("steps: [\n")
    rc = command.validate([str(bad), str(tmp_path / "absent.yml")], tmp_path)
    out = capsys.readouterr().out
    assert rc == 2  # a file that is not a pipeline is bad input (exit 2), not a lint finding
    assert f"{bad}: not valid YAML" in out
    assert "absent.yml: cannot read" in out
