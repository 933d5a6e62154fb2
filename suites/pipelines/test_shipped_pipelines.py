"""buildkite/pipeline.yml and buildkite/nightly.yml: valid, lint-clean, and covering what the issue asks."""

import re
from pathlib import Path

import pytest

from harness.moe.schemes import SCHEME_NAMES
from harness.pipelines import graph, lints, model, schema
from harness.pipelines.targets import target_of

REPO = Path(__file__).resolve().parents[2]
FILES = ["buildkite/pipeline.yml", "buildkite/nightly.yml"]
SCHEMES = ["bf16", *SCHEME_NAMES]


def load(name):
    return model.load(REPO / name)


@pytest.mark.parametrize("name", FILES)
def test_matches_buildkite_schema(name):
    assert [str(p) for p in schema.validate(load(name))] == []


@pytest.mark.parametrize("name", FILES)
def test_passes_every_lint(name):
    # Fails while a referenced file (e.g. an lm-eval config) is missing: that is the point.
    assert [str(p) for p in lints.lint(load(name), REPO)] == []


@pytest.mark.parametrize("name", FILES)
def test_annotation_runs_after_everything_even_on_failure(name):
    p = load(name)
    last_wait = max(i for i, s in enumerate(p.top) if s.kind == "wait")
    assert p.top[last_wait].raw.get("continue_on_failure") is True
    annotate = p.top[last_wait + 1]
    assert "junit-annotate" in " ".join(annotate.commands)
    deps = {id(e.dep) for e in graph.build(p).deps[id(p.top[last_wait])]}
    assert deps == {id(s) for s in p.top[:last_wait]}


def test_every_target_is_served():
    p = load("buildkite/pipeline.yml")
    targets = {target_of(s.queue) for s in p.command_steps}
    assert targets == {"cpu", "cuda", "rocm"}
    assert any(s.parallelism > 1 for s in p.command_steps if target_of(s.queue) == "cpu")
    assert p.env["HARNESS_PROFILE"] == "ci"


def _eval_steps(p):
    found = {}
    for s in p.command_steps:
        for c in s.commands:
            m = re.search(r"moe-harness eval --config suites/lm_eval/configs/tiny-(\S+)\.yaml", c)
            if m:
                found.setdefault(target_of(s.queue), set()).add(m.group(1))
    return found


def test_nightly_runs_tiny_eval_for_every_scheme_on_both_gpus():
    """Every scheme on the bundled tiny model, and every tiny family model config
    (tiny-<model_type>-<scheme>: the names with a dash after the family)."""
    from harness.lmeval.configs import tiny_family_config_paths

    p = load("buildkite/nightly.yml")
    assert p.env["HARNESS_PROFILE"] == "nightly"
    found = _eval_steps(p)
    families = {path.stem[len("tiny-"):] for path in tiny_family_config_paths()}
    assert found.get("cuda") == set(SCHEMES) | families
    assert found.get("rocm") == set(SCHEMES) | families


def test_gpu_commands_run_under_the_hang_watchdog():
    # Exit 124 is retried as a GPU hang only if `timeout` wraps the command, below the step timeout.
    for name in FILES:
        for s in load(name).command_steps:
            if target_of(s.queue) not in ("cuda", "rocm"):
                continue
            for c in s.commands:
                if c.startswith("make install"):
                    continue
                m = re.match(r"timeout --kill-after=\d+ (\d+)m ", c)
                assert m, f"{name}: {s.where}: {c!r} is not under the watchdog"
                assert int(m.group(1)) < s.raw["timeout_in_minutes"], f"{name}: {s.where}"


def test_nightly_runs_every_real_checkpoint_config_on_both_gpus():
    configs = {p.name for p in (REPO / "suites/lm_eval/configs").glob("nightly-*.yaml")}
    found = {}
    for s in load("buildkite/nightly.yml").command_steps:
        for c in s.commands:
            m = re.search(r"moe-harness eval --config suites/lm_eval/configs/(nightly-\S+\.yaml)", c)
            if m:
                found.setdefault(target_of(s.queue), set()).add(m.group(1))
                assert s.env.get("HARNESS_REQUIRE_CHECKPOINT") == "1", s.where
    assert found.get("cuda", set()) == configs
    assert found.get("rocm", set()) == configs
