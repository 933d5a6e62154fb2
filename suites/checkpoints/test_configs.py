"""The accuracy configs of producer checkpoints and the nightly configs' checkpoint
sections: every producer x scheme has its config; every nightly config names the
producer format it expects; a folder in another format FAILS the run (exit 1,
naming both formats) and an absent one is skipped (exit 3 under
HARNESS_REQUIRE_CHECKPOINT=1)."""
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.checkpoints import detect, producers
from harness.models import source
from harness.lmeval import config as C
from harness.lmeval.configs import config_name

from suites.checkpoints.producer_checkpoints import made

CONFIGS = Path(__file__).resolve().parents[1] / "lm_eval" / "configs"
NIGHTLY = sorted(CONFIGS.glob("nightly-*.yaml"))


@pytest.mark.parametrize("producer,scheme", [(p, s) for p, r in producers.PRODUCERS.items() for s in r.schemes])
def test_every_producer_scheme_has_its_config(producer, scheme):
    cfg = C.load(CONFIGS / config_name(producer, scheme))
    assert cfg.checkpoint.producer == producer and cfg.checkpoint.producer_scheme == scheme
    assert cfg.checkpoint.format == producers.get(producer).fmt
    assert cfg.scheme == producers.harness_scheme(producer, scheme)
    assert cfg.kl is not None and cfg.kl.oracle


@pytest.fixture(scope="module")
def producer_session():
    """One evaluation session for the module; its models pinned to one torch
    thread like the lm-eval suite's (the adapter's default of 2 under
    `pytest -n 2` on 2 cores made these 7 runs take 4 min instead of 30 s)."""
    from harness.lmeval.evaluate import Session

    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_TORCH_THREADS", "1")
    yield Session(disable_tqdm=True)
    mp.undo()


@pytest.mark.slow
@pytest.mark.parametrize("producer,scheme", [(p, s) for p, r in producers.PRODUCERS.items() for s in r.schemes])
def test_every_producer_checkpoint_passes_its_measured_gates(producer, scheme, producer_session):
    """The tiny lm-eval of each producer checkpoint with the
    thresholds measured under the CPU kernel sets, on the first 200 items as
    `moe-harness run` does: every metric has a value, the paired and KL gates
    are armed, and the run passes them all."""
    from harness.lmeval.evaluate import run_config
    from harness.lmeval.expected import RUN_LIMIT

    made(producer, scheme)  # skips with the reason when the producer is not installed
    cfg = C.load(CONFIGS / config_name(producer, scheme))
    assert cfg.kl is not None and cfg.kl.max is not None
    if producers.get(producer).model is None:
        assert all(m.value is not None for t in cfg.tasks for m in t.metrics), "thresholds not measured"
        assert cfg.paired is not None
    r = run_config(cfg, session=producer_session, limit=RUN_LIMIT)
    assert not r.get("skipped") and r["passed"], r["message"]


@pytest.mark.parametrize("producer,scheme", [(p, s) for p, r in producers.PRODUCERS.items() if r.model
                                             for s in r.schemes])
def test_a_family_models_config_is_its_tiny_family_config_with_the_checkpoint(producer, scheme):
    """A random family model has no accuracy: its checkpoint config is the tiny
    family config of its scheme (KL and certified-oracle gates) plus the
    checkpoint section, as `checkpoint_expected bootstrap` renders it."""
    from harness.lmeval.checkpoint_expected import render_family

    assert (CONFIGS / config_name(producer, scheme)).read_text() == render_family(producer, scheme)
    cfg = C.load(CONFIGS / config_name(producer, scheme))
    assert cfg.model_name == producers.get(producer).model and cfg.kl.oracle_max == 0.0


def test_a_checkpoint_config_names_the_model_its_producer_quantized():
    data = {"model_name": "tiny-moe", "tasks": [{"name": "tiny_add_rolling",
                                                  "metrics": [{"name": "bits_per_byte", "value": None}]}],
            "harness": {"scheme": "w_mxfp4", "checkpoint": {
                "format": "gpt-oss", "producer": "gpt-oss@tiny-gpt_oss", "producer_scheme": "mxfp4"}}}
    with pytest.raises(C.ConfigError) as e:
        C.parse(data, "cfg.yaml")
    assert e.value.field == "model_name" and "tiny-gpt_oss" in str(e.value)


def test_no_config_for_a_scheme_the_producer_does_not_make():
    known = {config_name(p, s) for p, r in producers.PRODUCERS.items() for s in r.schemes}
    assert {p.name for p in CONFIGS.glob("producer-*.yaml")} == known


@pytest.mark.parametrize("path", NIGHTLY, ids=[p.stem for p in NIGHTLY])
def test_nightly_configs_name_their_producer_format(path):
    cfg = C.load(path)
    assert cfg.checkpoint is not None and cfg.checkpoint.format in detect.FORMAT_NAMES
    assert cfg.checkpoint.subdir and cfg.model_dir_env


@pytest.mark.parametrize("raw,field", [
    ({"format": "safetensors", "subdir": "x"}, "harness.checkpoint.format"),
    ({"format": "modelopt"}, "harness.checkpoint"),
    ({"format": "quark", "producer": "llmcompressor", "producer_scheme": "nvfp4"}, "harness.checkpoint.format"),
    ({"format": "compressed-tensors", "producer": "llmcompressor", "producer_scheme": "mxfp4"}, "harness.scheme"),
    ({"format": "modelopt", "subdir": "x", "sub": 1}, "harness.checkpoint.sub"),
])
def test_bad_checkpoint_section_names_the_field(raw, field):
    data = {"model_name": "tiny-moe", "tasks": [{"name": "tiny_add_mc", "metrics": [{"name": "acc", "value": 0.9}]}],
            "harness": {"scheme": "nvfp4", "model_dir_env": "X", "checkpoint": raw}}
    with pytest.raises(C.ConfigError) as e:
        C.parse(data, "cfg.yaml")
    assert e.value.field == field


def _agent(tmp_path, checkpoint_folder):
    """$HARNESS_CHECKPOINT_DIR with the tiny model standing in for Qwen3-30B-A3B."""
    shutil.copytree(source.model_dir(), tmp_path / "Qwen3-30B-A3B")
    if checkpoint_folder is not None:
        shutil.copytree(checkpoint_folder, tmp_path / "Qwen3-30B-A3B-NVFP4-llmcompressor")
    return tmp_path


def test_nightly_fails_on_a_checkpoint_in_another_format(tmp_path, monkeypatch, capsys):
    root = _agent(tmp_path / "agent", made("gpt-oss", "mxfp4"))   # not compressed-tensors
    monkeypatch.setenv("HARNESS_CHECKPOINT_DIR", str(root))
    monkeypatch.setenv("HARNESS_REQUIRE_CHECKPOINT", "1")
    rc = cli.main(["eval", "--config", str(CONFIGS / "nightly-qwen3-30b-a3b-nvfp4.yaml"), "--quiet",
                   "--reports", str(tmp_path / "reports")])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "FAILED: checkpoint:" in out and "compressed-tensors" in out and "found gpt-oss" in out


def test_nightly_skips_an_absent_checkpoint_and_require_makes_it_exit_3(tmp_path, monkeypatch, capsys):
    root = _agent(tmp_path / "agent", None)
    monkeypatch.setenv("HARNESS_CHECKPOINT_DIR", str(root))
    monkeypatch.setenv("HARNESS_REQUIRE_CHECKPOINT", "1")
    rc = cli.main(["eval", "--config", str(CONFIGS / "nightly-qwen3-30b-a3b-nvfp4.yaml"), "--quiet",
                   "--reports", str(tmp_path / "reports")])
    assert rc == 3
    assert "no compressed-tensors checkpoint at" in capsys.readouterr().out
