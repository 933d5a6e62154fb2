"""vLLM's FP4 MoE configs, run as the nightly runs them: each fixture is the
facts of vllm_configs.py (one place), each one with a synthetic family shape
has a step on both GPU targets, and the same commands (`checkpoint synth`,
then `eval --config <vLLM's yaml> --model DIR --task-map ...`) pass on the
CPU at the tiny shape of that family: loaded, run, every gate recorded."""
import shlex
from pathlib import Path

import pytest
import yaml

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness import cli
from harness.models.shapes import SHAPES, get_shape
from harness.pipelines import nightly
from suites.lm_eval.vllm_configs import VLLM_CONFIGS

REPO = Path(__file__).resolve().parents[2]
RUNS = {r.name: r for r in nightly.VLLM_RUNS}
# The tiny shape of each family `checkpoint synth` writes (the CPU twin of a real shape).
TINY_OF = {"mixtral": "tiny-mixtral", "qwen3_moe": "tiny-qwen3-moe", "deepseek_v3": "tiny-deepseek-v3",
           "llama4_text": "tiny-llama4", "gpt_oss": "tiny-gpt-oss"}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_fixture_is_the_facts_of_its_vllm_config(name):
    data = yaml.safe_load((REPO / RUNS[name].fixture).read_text())
    if name == "Mixtral-8x7B-Instruct-v0.1":  # the older fixture: vLLM's format, illustrative values
        assert data["model_name"] == VLLM_CONFIGS[name]["model_name"]
        assert [t["name"] for t in data["tasks"]] == [t["name"] for t in VLLM_CONFIGS[name]["tasks"]]
    else:
        assert data == VLLM_CONFIGS[name]
    assert "harness" not in data  # run unchanged: the scheme is the checkpoint's own


def test_every_fp4_moe_config_of_vllm_is_a_run_or_says_what_it_waits_for():
    assert set(RUNS) == {"DeepSeek-R1-NVFP4", "Qwen3-30B-A3B-NVFP4", "Llama-4-Scout-NVFP4", "gpt-oss-120b",
                         "Mixtral-8x7B-Instruct-v0.1"}
    for r in RUNS.values():
        assert (r.shape is None) == bool(r.why), r
        if r.shape is not None:
            assert r.shape in SHAPES and get_shape(r.shape).family in TINY_OF, r


def test_each_run_has_its_cuda_and_rocm_twin_in_the_nightly():
    text = (REPO / nightly.NIGHTLY_PATH).read_text()
    for r in RUNS.values():
        for t in ("cuda", "rocm"):
            key = f"key: {t}-vllm-{r.name.lower().replace('.', '-')}"
            assert (key in text) == (r.shape is not None), (r.name, t)


@pytest.mark.parametrize("name", sorted(n for n, r in RUNS.items() if r.shape is not None))
def test_the_nightly_commands_pass_at_the_tiny_shape_of_the_family(name, tmp_path, capsys):
    r = RUNS[name]
    step = nightly._vllm(nightly.CPU, r)
    synth, run = [shlex.split(c)[1:] for c in step.commands if c.startswith(".venv/bin/moe-harness")]
    out = str(tmp_path / "synth")
    synth = [out if a.startswith(nightly.SYNTH_DIR) else a for a in synth]
    synth[synth.index("--shape") + 1] = TINY_OF[get_shape(r.shape).family]
    run = [out if a.startswith(nightly.SYNTH_DIR) else a for a in run]
    run[run.index("--limit") + 1] = "3"
    reports = ["--reports", str(tmp_path / "reports")]
    assert cli.main(synth + ["--device", "cpu", "-q"] + reports) == 0
    capsys.readouterr()
    rc = cli.main(run + reports)
    got = capsys.readouterr()
    assert rc == 0, got.err
    assert "RECORDED: every gate recorded, none gated" in got.out, got.out
    task, standin = r.task_map.split("=")
    assert f"{task} runs as {standin} (--task-map)" in got.err + got.out
