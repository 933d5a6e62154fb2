"""vLLM's FP4 MoE configs run unchanged: a task whose data is not on this
machine (gsm8k, aime25, mmlu_pro: hub datasets) is one line naming the task
and how to provide its data (exit 2, before anything loads); gsm8k runs as
the bundled stand-in tiny_add_gsm with `--task-map gsm8k=tiny_add_gsm`, whose
two lm-eval filters extract as gsm8k's do."""

import json
import re
from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness import cli
from harness.lmeval import config as C
from harness.lmeval import task_names, tasks
from suites.lm_eval.vllm_configs import VLLM_CONFIGS, one_line, write

STANDIN = task_names.STAND_INS["gsm8k"]
MAP = f"gsm8k={STANDIN}"


def _task(name: str) -> str:
    return VLLM_CONFIGS[name]["tasks"][0]["name"]


@pytest.fixture
def empty_hf_caches(tmp_path, monkeypatch):
    """The user's hub and datasets caches, empty (the machine has no copy of gsm8k)."""
    for kind in ("hub", "datasets"):
        (tmp_path / kind).mkdir()
    monkeypatch.setenv("HARNESS_USER_HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HARNESS_USER_HF_DATASETS_CACHE", str(tmp_path / "datasets"))


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    return rc, capsys.readouterr()


# ---- the filters extract as lm-eval's gsm8k filters do

@pytest.fixture(scope="module")
def standin():
    from lm_eval.tasks import get_task_dict

    return get_task_dict([STANDIN], tasks.task_manager())[STANDIN]


def score(task, doc, output: str) -> dict:
    """{filter name: exact_match} of one model output, through the task's own filters and metric."""
    out = {}
    for ensemble in task._filters:
        inst = SimpleNamespace(resps=[output], doc=doc, filtered_resps={})
        ensemble.apply([inst])
        out[ensemble.name] = task.process_results(doc, [inst.filtered_resps[ensemble.name]])["exact_match"]
    return out


@pytest.mark.parametrize("output, strict, flexible", [
    ("1412\n#### 1412", 1, 1),          # the target itself
    ("1412", 0, 1),                     # no '####': strict fails, the last number is right
    ("1400+12=1412", 0, 1),             # flexible takes the LAST number
    ("1412\n#### 1413", 0, 0),
    ("#### 1412\n13+1=14", 1, 0),       # strict reads after '####'; the last number is 14
    ("#### 1,412", 1, 1),               # commas are ignored, as gsm8k's metric does
    ("<unk><unk><unk><unk> 1412", 0, 1),  # what the tiny model's tokenizer makes of '####'
    ("", 0, 0),
])
def test_filters_extract_as_gsm8k(standin, output, strict, flexible):
    doc = next(d for d in standin.test_docs() if d["answer"] == "1412\n#### 1412")
    assert [f.name for f in standin._filters] == ["strict-match", "flexible-extract"]
    assert score(standin, doc, output) == {"strict-match": strict, "flexible-extract": flexible}


def test_standin_is_few_shot_generation_with_gsm8k_metric_names(standin):
    assert standin.OUTPUT_TYPE == "generate_until" and standin.config.num_fewshot == 5
    assert standin.has_training_docs() and len(list(standin.fewshot_docs())) == 50
    assert len(list(standin.test_docs())) == 150
    from harness.lmeval import task_data

    gsm8k = {m["name"] for m in VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"]["tasks"][0]["metrics"]}
    assert task_data.reported_metrics(STANDIN) == gsm8k == {"exact_match,strict-match", "exact_match,flexible-extract"}


# ---- every vLLM config, unchanged: one line

@pytest.mark.parametrize("name", sorted(VLLM_CONFIGS))
def test_every_vllm_config_unchanged_is_one_line_naming_task_and_data(tmp_path, capsys, empty_hf_caches, name):
    path = write(tmp_path, VLLM_CONFIGS[name], f"{name}.yaml")
    task = _task(name)
    rc, out = run_cli(capsys, "eval", "--config", str(path), "--model", "tiny-moe", "--scheme", "nvfp4",
                      "--limit", "4", "--reports", str(tmp_path / "r"))
    assert rc == 2 and not (tmp_path / "r").exists()
    line = one_line(out.err)
    assert line.startswith(f"moe-harness eval: invalid config: {path}: tasks[0].name: {task}: data not on this machine")
    assert "load_dataset(" in line and "HF_DATASETS_CACHE" in line and "--include-path" in line
    standin = task_names.STAND_INS.get(task)
    assert (f"--task-map {task}={standin}" in line) == (standin is not None), line


# ---- every vLLM config with the stand-in: runs (gsm8k) or one line (another task)

@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VLLM_CONFIGS))
def test_every_vllm_config_with_the_standin_runs_or_is_one_line(tmp_path, capsys, empty_hf_caches, name):
    path = write(tmp_path, VLLM_CONFIGS[name], f"{name}.yaml")
    task = _task(name)
    reports = tmp_path / "r"
    rc, out = run_cli(capsys, "eval", "--config", str(path), "--model", "tiny-moe", "--scheme", "nvfp4",
                      "--task-map", f"{task}={STANDIN}", "--limit", "3", "--reports", str(reports))
    if task != "gsm8k":
        assert rc == 2 and not reports.exists()
        line = one_line(out.err)
        assert f"--task-map: {task}={STANDIN}: {STANDIN} reports" in line and "tasks[0].metrics[0]" in line, line
        return
    assert rc == 0 and "Traceback" not in out.out + out.err, out.out + out.err
    assert f"tasks[0].name: gsm8k runs as {STANDIN} (--task-map)" in out.err
    result = json.loads((reports / "latest" / "lm_eval" / "results.json").read_text())["results"][0]["details"]
    assert result["task_map"] == {STANDIN: "gsm8k"}
    for metric in ("exact_match,strict-match", "exact_match,flexible-extract"):
        m = result["metrics"][f"{STANDIN}:{metric}"]
        assert m["n"] == 3 and m["expected"] is None and 0.0 <= m["scheme"] <= 1.0 and 0.0 <= m["baseline"] <= 1.0
        assert f"rec  one_sided {STANDIN}:{metric}: recorded, no reference value" in out.out
        assert f"PASS paired {STANDIN}:{metric} vs bf16" in out.out
    raw = json.loads(next((reports / "latest" / "lm_eval" / "raw").glob("*.json")).read_text())["scheme"]
    assert raw["n-shot"][STANDIN] == VLLM_CONFIGS[name]["num_fewshot"]
    flexible = [r["resps"][0] for r in raw["per_item"][STANDIN] if r["filter"] == "flexible-extract"]
    assert len(flexible) == 3 and all(re.fullmatch(r"-?[0-9.,]+", r) for r in flexible), flexible  # numbers


# ---- --task-map refusals: one line naming the flag

@pytest.mark.parametrize("flag, says", [
    ("gsm8k", "expected NAME=TASK"),
    ("gsm8=tiny_add_gsm", "gsm8 is not a task of"),
    ("gsm8k=tiny_add_gsn", "unknown task tiny_add_gsn"),
    ("gsm8k=tiny_add_gen", "tiny_add_gen reports exact_match,none, not exact_match,strict-match"),
])
def test_a_bad_task_map_is_one_line(tmp_path, capsys, empty_hf_caches, flag, says):
    path = write(tmp_path, VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"])
    rc, out = run_cli(capsys, "eval", "--config", str(path), "--model", "tiny-moe", "--scheme", "nvfp4",
                      "--task-map", flag, "--dry-run")
    assert rc == 2
    line = one_line(out.err)
    assert line.startswith("moe-harness eval: invalid argument: --task-map: ") and says in line, line


def test_a_task_the_gates_name_is_not_mapped(tmp_path):
    data = dict(VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"],
                harness={"scheme": "nvfp4", "gates": {"paired": {"allowances": {"gsm8k:exact_match,strict-match": 0.05}}}})
    with pytest.raises(C.ConfigError) as e:
        C.load(write(tmp_path, data), task_map={"gsm8k": STANDIN})
    assert e.value.path == "--task-map" and "harness.gates name gsm8k" in str(e.value)


def test_mapped_values_are_recorded_not_gated(tmp_path):
    cfg = C.load(write(tmp_path, VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"]), task_map={"gsm8k": STANDIN})
    assert cfg.task_names == [STANDIN] and cfg.task_map == {STANDIN: "gsm8k"}
    assert [(m.name, m.value) for m in cfg.tasks[0].metrics] == [
        ("exact_match,strict-match", None), ("exact_match,flexible-extract", None)]
    assert any("0.616" in n and "recorded, not gated" in n for n in cfg.notes)
