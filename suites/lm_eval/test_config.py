"""Config parsing: vLLM's format loads unchanged; every shipped config loads;
malformed configs fail naming the file and the field; --dry-run loads nothing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.lmeval import config as C
from harness.lmeval.schemes import SCHEMES

HERE = Path(__file__).resolve().parent
CONFIGS = sorted((HERE / "configs").glob("*.yaml"))
VLLM_EXAMPLE = HERE / "fixtures" / "vllm-Mixtral-8x7B-Instruct-v0.1.yaml"


def test_vllm_format_loads_unchanged():
    cfg = C.load(VLLM_EXAMPLE)
    assert cfg.model_name == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert cfg.task_names == ["gsm8k"]
    assert [(m.name, m.value) for m in cfg.tasks[0].metrics] == [
        ("exact_match,strict-match", 0.616), ("exact_match,flexible-extract", 0.632)]
    assert (cfg.limit, cfg.num_fewshot, cfg.rtol) == (250, 5, C.DEFAULT_RTOL)
    assert cfg.scheme is None and cfg.baseline_scheme == "bf16" and not cfg.warnings


def test_every_scheme_has_a_tiny_config_and_all_configs_load():
    """(The tiny random family models' configs, tiny-<model_type>-<scheme>.yaml,
    have KL gates only: suites/lm_eval/test_tiny_families.py.)"""
    from harness.lmeval.configs import tiny_family_config_paths

    names = {p.name for p in CONFIGS}
    families = {p.name for p in tiny_family_config_paths()}
    for s in SCHEMES:
        assert f"tiny-{s}.yaml" in names
    for p in CONFIGS:
        cfg = C.load(p)
        if p.name.startswith("tiny-") and p.name not in families:
            assert cfg.scheme == p.stem[len("tiny-"):]
            assert cfg.kl is not None and cfg.kl.max is not None, p
            if cfg.scheme != "bf16":
                assert cfg.kl.oracle and cfg.kl.oracle_max is not None, p
            assert all(m.value is not None for t in cfg.tasks for m in t.metrics), p


BASE = {"model_name": "tiny-moe", "tasks": [{"name": "tiny_add_mc", "metrics": [{"name": "acc", "value": 0.9}]}]}


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.pop("model_name"), "model_name"),
    (lambda d: d.update(tasks=[]), "tasks"),
    (lambda d: d["tasks"][0].pop("metrics"), "tasks[0].metrics"),
    (lambda d: d["tasks"][0]["metrics"][0].update(value="high"), "tasks[0].metrics[0].value"),
    (lambda d: d["tasks"][0]["metrics"][0].pop("value"), "tasks[0].metrics[0].value"),
    (lambda d: d.update(rtol=2), "rtol"),
    (lambda d: d.update(limit=0), "limit"),
    (lambda d: d.update(num_fewshot="five"), "num_fewshot"),
    (lambda d: d.update(harness={"scheme": "nvfp5"}), "harness.scheme"),
    (lambda d: d.update(harness={"schem": "nvfp4"}), "harness.schem"),
    (lambda d: d.update(harness={"gates": {"paired": {"allowance": -1}}}), "harness.gates.paired.allowance"),
    (lambda d: d.update(harness={"gates": {"kl": {"task": "nope", "max": 1}}}), "harness.gates.kl.task"),
    (lambda d: d.update(harness={"gates": {"kl": {"task": "tiny_add_mc", "max": "x"}}}), "harness.gates.kl.max"),
])
def test_malformed_config_names_file_and_field(tmp_path, mutate, field):
    data = json.loads(json.dumps(BASE))
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(C.ConfigError) as e:
        C.load(path)
    assert e.value.field == field
    assert str(path) in str(e.value) and field in str(e.value)


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(C.ConfigError, match="<file>"):
        C.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: [\n")
    with pytest.raises(C.ConfigError, match="<yaml>"):
        C.load(bad)


def test_unknown_top_level_key_is_an_error_not_silent(tmp_path):
    data = dict(BASE, some_future_vllm_key=1)
    with pytest.raises(C.ConfigError) as e:
        C.parse(data, tmp_path / "x.yaml")
    assert e.value.field == "some_future_vllm_key" and "unknown top-level key" in str(e.value)


def test_metric_without_filter_gets_none_filter():
    assert C.parse(BASE).tasks[0].metrics[0].name == "acc,none"


def test_nightly_configs_skip_cleanly_without_weights(monkeypatch):
    nightly = [p for p in CONFIGS if p.name.startswith("nightly-")]
    assert nightly
    for p in nightly:
        cfg = C.load(p)
        monkeypatch.delenv(cfg.model_dir_env, raising=False)
        with pytest.raises(C.ModelNotPresent, match=cfg.model_dir_env):
            C.resolve_model_dir(cfg)


def _cli(*args, env=None):
    import os

    e = dict(os.environ, PYTHONPATH=str(HERE.parents[1]))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          cwd=HERE.parents[1], env=e, timeout=600)  # a hang guard, not a speed check


def test_dry_run_prints_the_plan_without_loading_a_model():
    r = _cli("eval", "--config", str(HERE / "configs" / "tiny-nvfp4.yaml"), "--dry-run", "--limit", "7")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["scheme"] == "nvfp4" and plan["limit"] == 7 and plan["model"] == "present"
    assert any(g.startswith("kl") for g in plan["gates"])
    # nothing heavy was imported by the dry run
    r2 = subprocess.run([sys.executable, "-c", "import sys; import harness.commands.eval, harness.lmeval.config;"
                         "print('transformers' in sys.modules, 'lm_eval' in sys.modules)"],
                        capture_output=True, text=True, cwd=HERE.parents[1],
                        env={"PYTHONPATH": str(HERE.parents[1]), "PATH": "/usr/bin:/bin"})
    assert r2.stdout.split() == ["False", "False"], r2.stderr


def test_malformed_config_exit_code(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"model_name": "tiny-moe", "tasks": [{"name": "x"}]}))
    r = _cli("eval", "--config", str(bad), "--dry-run")
    assert r.returncode == 2 and "tasks[0].metrics" in r.stderr and str(bad) in r.stderr


@pytest.mark.slow
def test_missing_checkpoint_skips_with_message(monkeypatch):
    p = next(p for p in CONFIGS if p.name.startswith("nightly-"))
    env = {"HARNESS_CHECKPOINT_DIR": "/nonexistent-checkpoints"}
    r = _cli("eval", "--config", str(p), env=env)
    assert r.returncode == 0 and "SKIPPED" in r.stdout, (r.stdout, r.stderr)
    r = _cli("eval", "--config", str(p), env=dict(env, HARNESS_REQUIRE_CHECKPOINT="1"))
    assert r.returncode == 3
