"""A user's first config tells the truth: vLLM's own lm-eval
configs run as vLLM means them or are refused in one line (exit 2); the plot
survives an accuracy of 1.0; --scheme never inherits another scheme's
thresholds; the dry-run plan is the list of gates the run evaluates;
registry tasks run from local data or are refused in the dry run.

The vLLM facts below are small fixtures written here from vLLM's
.buildkite/lm-eval-harness/configs/ (model ids, tasks, metric names, the
keys vLLM's driver reads), not copies of its files.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.lmeval import config as C
from harness.lmeval import expected, gate_plan, report
from suites.lm_eval.vllm_configs import VLLM_CONFIGS, one_line, write

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFIGS = sorted((HERE / "configs").glob("*.yaml"))
TINY = HERE / "configs" / "tiny-nvfp4.yaml"

def run_cli(*argv, capsys):
    rc = cli.main(list(argv))
    return rc, capsys.readouterr()


@pytest.fixture
def empty_hf_caches(tmp_path, monkeypatch):
    """The user's hub and datasets caches, empty (the machine has no copies)."""
    hub, ds = tmp_path / "hub", tmp_path / "datasets"
    hub.mkdir()
    ds.mkdir()
    monkeypatch.setenv("HARNESS_USER_HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HARNESS_USER_HF_DATASETS_CACHE", str(ds))
    return hub, ds


# ---- finding 1: accuracy 1.0 crashed the plot after every gate passed

def test_plot_survives_accuracy_one(tmp_path):
    assert report.error_bars(1.0, 100)[1] >= 0 and report.error_bars(0.0, 100)[0] >= 0
    result = {"name": "lm_eval/x", "passed": True, "details": {
        "scheme": "nvfp4", "limit": 100,
        "metrics": {"gsm8k:exact_match,strict-match": {"scheme": 1.0, "baseline": 1.0, "expected": 0.89, "n": 100}},
        "gates": [{"gate": "one_sided", "name": "gsm8k:exact_match,strict-match", "passed": True,
                   "details": {"bound": 0.8188}}]}}
    png = report.plot(tmp_path / "p.png", [result])
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


# ---- finding 2: vLLM configs went silently green

@pytest.mark.parametrize("name", sorted(VLLM_CONFIGS))
def test_every_vllm_config_loads_and_absent_is_one_line_exit_2(tmp_path, capsys, empty_hf_caches, name):
    path = write(tmp_path, VLLM_CONFIGS[name], f"{name}.yaml")
    cfg = C.load(path)
    assert cfg.warnings == [] and cfg.scheme is None
    rc, out = run_cli("eval", "--config", str(path), "--dry-run", capsys=capsys)
    assert rc == 2, out.out
    line = one_line(out.err)
    assert VLLM_CONFIGS[name]["model_name"] in line and "--model-optional" in line


@pytest.mark.parametrize("name", sorted(VLLM_CONFIGS))
def test_every_vllm_config_on_a_float_model_without_scheme_is_refused(tmp_path, capsys, empty_hf_caches, name):
    """The silent bf16-vs-bf16 pass: a float model and no scheme is exit 2, naming what to add."""
    path = write(tmp_path, VLLM_CONFIGS[name], f"{name}.yaml")
    rc, out = run_cli("eval", "--config", str(path), "--model", "tiny-moe", "--dry-run", capsys=capsys)
    assert rc == 2
    line = one_line(out.err)
    assert "harness.scheme" in line and "--scheme" in line and "quantization_config" in line


@pytest.mark.parametrize("name", sorted(VLLM_CONFIGS))
def test_every_vllm_config_with_a_scheme_is_refused_for_missing_task_data(tmp_path, capsys, empty_hf_caches, name):
    """gsm8k / aime25 / mmlu_pro are lm-eval tasks: with no local data the dry run says so in one line."""
    path = write(tmp_path, VLLM_CONFIGS[name], f"{name}.yaml")
    task = VLLM_CONFIGS[name]["tasks"][0]["name"]
    rc, out = run_cli("eval", "--config", str(path), "--model", "tiny-moe", "--scheme", "nvfp4", "--dry-run",
                      capsys=capsys)
    assert rc == 2
    line = one_line(out.err)
    assert f"tasks[0].name: {task}" in line and "load_dataset" in line and "--include-path" in line


def test_absent_model_marked_optional_is_skipped(tmp_path, capsys, empty_hf_caches):
    data = dict(VLLM_CONFIGS["DeepSeek-R1-NVFP4"], tasks=[{"name": "tiny_add_mc", "metrics": [{"name": "acc",
                                                                                                 "value": 0.5}]}])
    path = write(tmp_path, data)
    rc, out = run_cli("eval", "--config", str(path), "--dry-run", "--model-optional", capsys=capsys)
    assert rc == 0 and json.loads(out.out)["model"].startswith("absent -> run SKIPPED")
    data["harness"] = {"model_optional": True}
    rc, out = run_cli("eval", "--config", str(write(tmp_path, data)), "--dry-run", capsys=capsys)
    assert rc == 0 and json.loads(out.out)["model"].startswith("absent -> run SKIPPED")


def test_a_hub_id_resolves_to_its_snapshot_in_the_local_hub_cache(tmp_path, empty_hf_caches):
    hub, _ = empty_hf_caches
    repo = hub / "models--nvidia--DeepSeek-R1-NVFP4"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    cfg = C.parse(VLLM_CONFIGS["DeepSeek-R1-NVFP4"], tmp_path / "x.yaml")
    assert C.resolve_model_dir(cfg) == str(snap)


def test_a_typo_in_a_top_level_key_is_an_error_with_the_nearest_key(tmp_path):
    data = dict(VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"], limt=10)
    with pytest.raises(C.ConfigError) as e:
        C.parse(data, tmp_path / "x.yaml")
    assert e.value.field == "limt" and "did you mean 'limit'" in str(e.value)


def test_vllm_driver_keys_stay_known():
    """Every key vLLM's driver (test_lm_eval_correctness.py) or its configs set loads without error."""
    used = {k for d in VLLM_CONFIGS.values() for k in d}
    assert used <= C.VLLM_KEYS
    assert {"attention_backend", "jit_monitor_mode", "moe_backend", "required_gpu_arch", "env_vars"} <= C.VLLM_KEYS


@pytest.fixture(scope="module")
def nvfp4_checkpoint(tmp_path_factory):
    """A compressed-tensors NVFP4 folder of the tiny model's shape (what nvidia/*-NVFP4 hold)."""
    from harness.checkpoints import synthetic

    out = tmp_path_factory.mktemp("ckpt") / "Tiny-NVFP4"
    synthetic.write("tiny-moe", "nvfp4", out, seed=0, device="cpu")
    return out


def test_without_a_scheme_the_scheme_is_the_checkpoints_own(tmp_path, capsys, nvfp4_checkpoint):
    # random synthetic weights: the value is recorded, not gated; what is checked is where the scheme came from
    data = {"model_name": "nvidia/Tiny-MoE-NVFP4", "tasks": [{"name": "tiny_add_mc", "metrics": [{"name": "acc",
                                                                                                 "value": None}]}],
            "limit": 8, "num_fewshot": 0, "kv_cache_dtype": "nvfp4"}
    path = write(tmp_path, data)
    rc, out = run_cli("eval", "--config", str(path), "--model", str(nvfp4_checkpoint), "--dry-run", capsys=capsys)
    plan = json.loads(out.out)
    assert rc == 0 and plan["scheme_from"] == "checkpoint" and plan["baseline_scheme"] is None
    assert [g.split()[0] for g in plan["gates"]] == ["one_sided"]
    rc, out = run_cli("eval", "--config", str(path), "--model", str(nvfp4_checkpoint), "-q",
                      "--reports", str(tmp_path / "r"), capsys=capsys)
    assert rc == 0, out.out + out.err
    res = json.loads((tmp_path / "r" / "latest" / "lm_eval" / "results.json").read_text())["results"][0]
    assert res["details"]["scheme"] == "nvfp4" and res["details"]["scheme_from"] == "checkpoint"
    # a scheme the checkpoint does not hold: refused before loading, one line
    rc, out = run_cli("eval", "--config", str(path), "--model", str(nvfp4_checkpoint), "--scheme", "w_mxfp8",
                      "--reports", str(tmp_path / "r"), capsys=capsys)
    assert rc == 2 and "is a compressed-tensors checkpoint of nvfp4" in out.err.splitlines()[-1]


# ---- finding 4: --scheme kept the other scheme's thresholds

def test_scheme_override_against_another_schemes_thresholds_is_refused(capsys):
    rc, out = run_cli("eval", "--config", str(TINY), "--scheme", "w_mxfp4_a_mxfp4", "--dry-run", capsys=capsys)
    assert rc == 2
    line = one_line(out.err)
    assert "written for nvfp4" in line and "tiny-w_mxfp4_a_mxfp4.yaml" in line and "--record-only" in line
    rc, out = run_cli("eval", "--config", str(TINY), "--scheme", "w_mxfp4_a_mxfp4", "--record-only", "--dry-run",
                      capsys=capsys)
    gates = json.loads(out.out)["gates"]
    assert rc == 0 and gates and all(g.endswith("(record only)") or "recorded" in g for g in gates)


def test_record_only_gates_measure_but_never_fail():
    spec = gate_plan.GateSpec("kl", "t", "kl", 0.0377, record_only=True, against="bf16")
    from harness.lmeval.evaluate import evaluate_gates

    (g,) = evaluate_gates([spec], {}, {}, {"mean_kl": 0.05498, "n_tokens": 10, "max_token_kl": 1.0})
    assert g.passed and g.skipped and g.details["mean_kl"] == 0.05498 and "record only" in g.details["note"]


# ---- finding 5: the dry-run plan misstated the gates

def _fake_outputs(cfg):
    """lm-eval-shaped outputs with every configured metric (0/1 per item for the binary ones)."""
    out = {"results": {}, "samples": {}, "n-samples": {}}
    for t in cfg.tasks:
        out["results"][t.name] = {m.name: 0.5 for m in t.metrics}
        rows = []
        for i in range(4):
            row = {"doc_id": i, "filter": "none"}
            row.update({m.name.split(",")[0]: float(i % 2) for m in t.metrics})
            rows.append(row)
        out["samples"][t.name] = rows
        out["n-samples"][t.name] = {"original": 4, "effective": 4}
    return out


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_plan_is_the_list_of_gates_the_run_evaluates(path, capsys):
    from harness.lmeval.evaluate import evaluate_gates

    cfg = C.load(path)
    specs = gate_plan.plan_gates(cfg, cfg.scheme)
    rc, out = run_cli("eval", "--config", str(path), "--dry-run", "--model-optional", capsys=capsys)
    assert rc == 0, out.err
    assert json.loads(out.out)["gates"] == [s.describe() for s in specs]
    fake = _fake_outputs(cfg)
    kl = {"mean_kl": 0.0, "n_tokens": 1, "max_token_kl": 0.0, "certification": {}}
    results = evaluate_gates(specs, fake, fake, kl, kl)
    assert [(g.gate, g.name) for g in results] == [(s.gate, s.name) for s in specs]
    for s, g in zip(specs, results):
        used = {"one_sided": "bound", "paired": "allowance", "kl": "threshold", "kl_oracle": "threshold"}[s.gate]
        if s.threshold is not None:
            assert g.details[used] == s.threshold, (s.describe(), g.details)
        assert g.details["plan"] == s.describe()


def test_the_nvfp4_plan_states_what_the_run_gates():
    cfg = C.load(TINY)
    plan = [s.describe() for s in gate_plan.plan_gates(cfg, "nvfp4")]
    bpb = next(p for p in plan if "bits_per_byte" in p)
    assert "<= 2.70218" in bpb and "*(1+0.05)" in bpb
    assert any(p.startswith("kl_oracle") for p in plan)
    assert any("tiny_add_mc:acc,none" in p and "allowance 0.04" in p for p in plan)
    assert any("tiny_add_gen:exact_match,none" in p and "allowance 0.08" in p for p in plan)


# ---- thresholds rendered from measured spreads round outward

def test_rendered_thresholds_round_outward_on_the_boundary():
    below = math.nextafter(0.9783, 0.0)            # one ulp under a 4-decimal grid point
    assert expected._outward(below, "t:acc,none") == 0.9782 <= below
    assert expected._outward(0.9783, "t:acc,none") == 0.9783     # on the grid: itself
    above = math.nextafter(2.5735, 3.0)
    assert expected._outward(above, "t:bits_per_byte,none") == 2.5736 >= above
    x = math.nextafter(0.0377, 1.0)
    assert expected.round_up_sig(x) == 0.0378 >= x and expected.round_up_sig(0.0377) == 0.0377


# ---- finding 3: registry tasks (gsm8k) died after loading the model

def test_registry_task_data_in_the_datasets_cache_passes_the_dry_run(tmp_path, capsys, empty_hf_caches):
    _, ds = empty_hf_caches
    (ds / "openai___gsm8k" / "main").mkdir(parents=True)
    path = write(tmp_path, VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"])
    rc, out = run_cli("eval", "--config", str(path), "--model", "tiny-moe", "--scheme", "nvfp4", "--dry-run",
                      capsys=capsys)
    assert rc == 0, out.err


def test_a_group_task_is_checked_through_its_subtasks(tmp_path, capsys, empty_hf_caches):
    from harness.lmeval import task_data

    leaves = task_data.leaf_tasks("mmlu_pro")
    assert len(leaves) >= 14 and all(spec.get("dataset_path") == "TIGER-Lab/MMLU-Pro" for _, spec in leaves)


def local_gsm8k(folder: Path, n_test: int = 12) -> Path:
    """A task named gsm8k whose data is on this machine: addition problems
    (the tiny model's language), with vLLM's filter names."""
    import random

    rng = random.Random(20261201)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 6), ("test", n_test)):
        pairs = [(rng.randint(1, 499), rng.randint(1, 499)) for _ in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"question": f"{a}+{b}=", "answer": str(a + b)})
                                                        + "\n" for a, b in pairs))
    task = {
        "task": "gsm8k", "dataset_path": "json",
        "dataset_kwargs": {"data_files": {s: str(folder / f"{s}.jsonl") for s in ("train", "test")}},
        "output_type": "generate_until", "training_split": "train", "fewshot_split": "train", "test_split": "test",
        "doc_to_text": "{{question}}", "doc_to_target": "{{answer}}", "target_delimiter": "",
        "fewshot_delimiter": "\n", "generation_kwargs": {"until": ["\n"], "do_sample": False, "max_gen_toks": 6},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "filter_list": [
            {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
                                                {"function": "take_first"}]},
            {"name": "flexible-extract", "filter": [{"function": "regex", "group_select": -1,
                                                     "regex_pattern": "(-?[0-9.,]{2,})|(-?[0-9]+)"},
                                                    {"function": "take_first"}]}],
        "metadata": {"version": 1.0},
    }
    (folder / "gsm8k.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    return folder


def test_include_path_task_with_missing_files_is_refused(tmp_path, capsys, empty_hf_caches):
    folder = local_gsm8k(tmp_path / "tasks")
    (folder / "test.jsonl").unlink()
    path = write(tmp_path, VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"])
    rc, out = run_cli("eval", "--config", str(path), "--model", "tiny-moe", "--scheme", "nvfp4", "--dry-run",
                      "--include-path", str(folder), capsys=capsys)
    assert rc == 2 and "test.jsonl missing" in one_line(out.err)


@pytest.mark.slow
def test_vllm_mixtral_config_runs_gsm8k_from_an_include_path(tmp_path, empty_hf_caches):
    """vLLM's Mixtral config, unchanged, against the tiny model as nvfp4 and a
    local gsm8k: gates run, a report is written, nothing downloads."""
    folder = local_gsm8k(tmp_path / "tasks")
    path = write(tmp_path, VLLM_CONFIGS["Mixtral-8x7B-Instruct-v0.1"])
    r = subprocess.run([sys.executable, "-m", "harness.cli", "eval", "--config", str(path), "--model", "tiny-moe",
                        "--scheme", "nvfp4", "--include-path", str(folder), "--limit", "12",
                        "--reports", str(tmp_path / "r")], capture_output=True, text=True, cwd=REPO, timeout=900,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HARNESS_TORCH_THREADS": "1",
                            "HARNESS_CACHE_DIR": str(tmp_path / "cache"),
                            "HARNESS_USER_HF_HUB_CACHE": str(empty_hf_caches[0]),
                            "HARNESS_USER_HF_DATASETS_CACHE": str(empty_hf_caches[1])})
    assert r.returncode in (0, 1) and "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    res = json.loads((tmp_path / "r" / "latest" / "lm_eval" / "results.json").read_text())["results"][0]
    flex = res["details"]["metrics"]["gsm8k:exact_match,flexible-extract"]
    assert flex["n"] == 12 and flex["scheme"] > 0.3 and flex["baseline"] > 0.3   # the tiny model adds
    assert res["details"]["metrics"]["gsm8k:exact_match,strict-match"]["scheme"] == 0.0  # no '####' in its answers
    assert "FAIL one_sided gsm8k:exact_match,strict-match" in r.stdout and r.returncode == 1


# ---- finding 8: long work was silent; the plots cut their thresholds off

def test_progress_meter_prints_rate_and_eta_every_few_seconds():
    from harness.lmeval.progress import Meter

    now = [0.0]
    lines = []
    m = Meter("lm_eval/x: nvfp4", lines.append, every=2.0, clock=lambda: now[0])
    for done in range(0, 101, 10):     # a batch of 10 requests per second
        now[0] = done / 10
        m.update("loglikelihood", done, 100)
    assert lines[0] == "      lm_eval/x: nvfp4: loglikelihood 20/100 requests, 10.0/s, ETA 8 s"
    assert len(lines) == 5 and lines[-1].endswith("100/100 requests, 10.0/s, done in 10.0 s")


def _kl_result(kl, threshold, acc, bound):
    return {"name": "lm_eval/x", "passed": True, "details": {
        "scheme": "nvfp4", "limit": 100,
        "metrics": {"t:acc,none": {"scheme": acc, "baseline": 0.99, "expected": 0.9, "n": 100}},
        "gates": [{"gate": "one_sided", "name": "t:acc,none", "passed": acc >= bound, "details": {"bound": bound}},
                  {"gate": "kl", "name": "t:kl", "passed": kl <= threshold,
                   "details": {"mean_kl": kl, "threshold": threshold}}]}}


@pytest.mark.parametrize("kl,threshold", [(0.0342, 0.0377), (0.0015, 0.5), (0.09, 0.0377)])
def test_both_panels_draw_their_threshold_inside_the_axes(kl, threshold):
    fig = report.figure([_kl_result(kl, threshold, 0.97, 0.929)])
    acc_ax, kl_ax = fig.axes
    lo, hi = kl_ax.get_ylim()
    assert lo < threshold < hi and lo < kl < hi
    ticks = [ln for ln in kl_ax.get_lines() if list(ln.get_ydata()) == [threshold, threshold]]
    assert ticks, "the KL threshold is drawn"
    lo, hi = acc_ax.get_ylim()
    bounds = [ln for ln in acc_ax.get_lines() if list(ln.get_ydata()) == [0.929, 0.929]]
    assert bounds and lo < 0.929 < hi, "the accuracy panel draws the one-sided bound"


def test_a_modelopt_export_as_the_model_is_refused_in_one_line(tmp_path, capsys):
    """nvidia/*-NVFP4 (DeepSeek-R1, Qwen3-30B-A3B) are ModelOpt exports: the scheme is read
    from the folder, and the folder is refused as the model (no float weights
    to build the rest of the model from) before anything loads or a report is made."""
    from safetensors.torch import save_file
    import torch

    folder = tmp_path / "DeepSeek-R1-NVFP4"
    folder.mkdir()
    group = {"num_bits": 4, "type": "float", "group_size": 16, "dynamic": False}
    (folder / "config.json").write_text(json.dumps({"model_type": "deepseek_v3", "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4",
        "config_groups": {"group_0": {"weights": group, "input_activations": group, "targets": ["Linear"]}}}}))
    save_file({"x": torch.zeros(1)}, str(folder / "model.safetensors"))
    path = write(tmp_path, VLLM_CONFIGS["DeepSeek-R1-NVFP4"] | {"tasks": [
        {"name": "tiny_add_mc", "metrics": [{"name": "acc", "value": 0.9}]}]})
    rc, out = run_cli("eval", "--config", str(path), "--model", str(folder), "--reports", str(tmp_path / "r"),
                      capsys=capsys)
    assert rc == 2 and not (tmp_path / "r").exists()
    line = one_line(out.err)
    # refused as the model: either as a checkpoint that holds no float weights, or (this folder
    # has no experts) by the reader naming what it expected of a modelopt folder
    assert ("is a modelopt checkpoint" in line and "harness.checkpoint" in line) or (
        "modelopt layout" in line and str(folder) in line), line
