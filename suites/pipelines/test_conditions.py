"""`if` conditions and upload-time interpolation: what is understood, and what is refused."""

import pytest

from harness.pipelines.conditions import UnsupportedCondition, evaluate
from harness.pipelines.interpolate import InterpolationError, interpolate_pipeline, interpolate_string

VALUES = {"build.branch": "main", "build.source": "schedule", "build.pull_request.id": None,
          "build.message": "Fix NVFP4 scale", "env": {"HARNESS_PROFILE": "nightly"}}


@pytest.mark.parametrize("cond, expected", [
    ('build.branch == "main"', True),
    ("build.branch != 'main'", False),
    ('build.source == "schedule" && build.branch == "main"', True),
    ('build.source == "webhook" || build.pull_request.id == null', True),
    ('!(build.branch == "main")', False),
    ("build.message =~ /nvfp4/i", True),
    ("build.message !~ /^WIP/", True),
    ('build.env("HARNESS_PROFILE") == "nightly"', True),
    ('build.env("UNSET") == null', True),
])
def test_understood_conditions(cond, expected):
    assert evaluate(cond, VALUES) is expected


@pytest.mark.parametrize("cond", [
    'build.pull_request.labels includes "gpu"',   # operator and variable it does not know
    'build.branch == "main" )',                   # trailing garbage
    'build.branch ==',                            # incomplete
    "build.branch =~ 'main'",                     # =~ needs a /regex/
    "build.message =~ /x/m",                      # unknown flag
])
def test_unknown_conditions_are_refused(cond):
    with pytest.raises(UnsupportedCondition):
        evaluate(cond, VALUES)


def test_interpolation_forms():
    env = {"A": "1", "EMPTY": ""}
    assert interpolate_string("$A ${A} $$A \\$A ${B:-dflt} ${EMPTY:-x} ${EMPTY-x} $B.", env) == "1 1 $A $A dflt x  ."
    with pytest.raises(InterpolationError):
        interpolate_string("${A:0:1}", env)
    with pytest.raises(InterpolationError):
        interpolate_string("${B?must be set}", env)


def test_pipeline_env_is_visible_to_interpolation():
    doc = {"env": {"X": "${UP}-x"}, "steps": [{"command": "echo $X $$BUILDKITE_PARALLEL_JOB"}]}
    out = interpolate_pipeline(doc, {"UP": "u"})
    assert out["env"] == {"X": "u-x"}
    assert out["steps"][0]["command"] == "echo u-x $BUILDKITE_PARALLEL_JOB"
