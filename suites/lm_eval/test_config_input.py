"""Eval configs as input: every number finite and in range, every name the run
needs checked by the dry run, vLLM's real keys and fractional limits accepted,
hostile files refused in one line (harness.util.safe_yaml), and a dry run that
imports neither torch nor lm-eval."""

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.util import safe_yaml
from harness.lmeval import config as C
from harness.lmeval import report
from suites.hostile_yaml import alias_bomb

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TINY = HERE / "configs" / "tiny-nvfp4.yaml"
VLLM_EXAMPLE = HERE / "fixtures" / "vllm-Mixtral-8x7B-Instruct-v0.1.yaml"


def tiny_data() -> dict:
    return yaml.safe_load(TINY.read_text())


def write(tmp_path, data, name="cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def dry_run(path, *extra, capsys=None):
    rc = cli.main(["eval", "--config", str(path), "--dry-run", *extra])
    out = capsys.readouterr() if capsys else None
    return rc, out


def one_line_error(out, path) -> str:
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(lines) == 1, out.err
    assert str(path) in lines[0] and "Traceback" not in out.err + out.out
    return lines[0]


# ---- A: numbers finite and in range (a NaN compares false and disabled the paired gate)

NUMERIC_FIELDS = {
    # field -> (setter, values that must be refused)
    "rtol": (lambda d, v: d.__setitem__("rtol", v), [math.nan, math.inf, -0.1, 1.5]),
    "limit": (lambda d, v: d.__setitem__("limit", v), [math.nan, math.inf, 0, -5, 1.0, 2.5, 10**10]),
    "num_fewshot": (lambda d, v: d.__setitem__("num_fewshot", v), [math.nan, -1, 10**6]),
    "tasks[0].metrics[0].value": (lambda d, v: d["tasks"][0]["metrics"][0].__setitem__("value", v),
                                  [math.nan, math.inf, -math.inf]),
    "harness.batch_size": (lambda d, v: d["harness"].__setitem__("batch_size", v), [math.nan, 0, 10**9]),
    "harness.seed": (lambda d, v: d["harness"].__setitem__("seed", v), [math.nan, -1, 2**32]),
    "harness.gates.paired.allowance": (lambda d, v: d["harness"]["gates"]["paired"].__setitem__("allowance", v),
                                       [math.nan, math.inf, -0.01, 1.01]),
    "harness.gates.paired.allowances.tiny_add_mc:acc,none": (
        lambda d, v: d["harness"]["gates"]["paired"]["allowances"].__setitem__("tiny_add_mc:acc,none", v),
        [math.nan, -math.inf, 2]),
    "harness.gates.paired.confidence": (lambda d, v: d["harness"]["gates"]["paired"].__setitem__("confidence", v),
                                        [math.nan, math.inf, 0.2, 1.0]),
    "harness.gates.paired.resamples": (lambda d, v: d["harness"]["gates"]["paired"].__setitem__("resamples", v),
                                       [math.nan, 10**13, 10**6 + 1, 99]),
    "harness.gates.paired.seed": (lambda d, v: d["harness"]["gates"]["paired"].__setitem__("seed", v),
                                  [math.nan, -3, 2**40]),
    "harness.gates.kl.max": (lambda d, v: d["harness"]["gates"]["kl"].__setitem__("max", v),
                             [math.nan, math.inf, -1e-3]),
    "harness.gates.kl.oracle_max": (lambda d, v: d["harness"]["gates"]["kl"].__setitem__("oracle_max", v),
                                    [math.nan, math.inf, -1.0]),
    "harness.gates.kl.docs": (lambda d, v: d["harness"]["gates"]["kl"].__setitem__("docs", v), [math.nan, 0, 10**10]),
    "harness.calibration.docs": (lambda d, v: d["harness"].__setitem__("calibration", {"docs": v}), [math.nan, 0]),
    "harness.calibration.seed": (lambda d, v: d["harness"].__setitem__("calibration", {"seed": v}), [math.nan, -1]),
    "batch_size": (lambda d, v: d.__setitem__("batch_size", v), [math.nan, 0, "big"]),
    "seed": (lambda d, v: d.__setitem__("seed", v), [math.nan, -1, 2**32]),
    "max_model_len": (lambda d, v: d.__setitem__("max_model_len", v), [math.inf, 0]),
}
CASES = [(f, v) for f, (_, vals) in NUMERIC_FIELDS.items() for v in vals]


@pytest.mark.parametrize("fld,value", CASES, ids=[f"{f}={v!r}" for f, v in CASES])
def test_every_numeric_field_must_be_finite_and_in_range(tmp_path, fld, value):
    data = tiny_data()
    NUMERIC_FIELDS[fld][0](data, value)
    path = write(tmp_path, data)
    with pytest.raises(C.ConfigError) as e:
        C.load(path)
    assert e.value.field == fld, str(e.value)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_nan_allowance_no_longer_disables_the_paired_gate(tmp_path, capsys):
    text = TINY.read_text().replace("      allowance: 0.02\n", "      allowance: .nan\n")
    assert ".nan" in text
    path = tmp_path / "nan.yaml"
    path.write_text(text)
    rc, out = dry_run(path, capsys=capsys)
    assert rc == 2
    assert "harness.gates.paired.allowance: must be a finite number, got nan" in one_line_error(out, path)


def test_shipped_configs_still_load_with_every_numeric_check_on():
    for p in sorted((HERE / "configs").glob("*.yaml")):
        cfg = C.load(p)
        assert cfg.paired is None or cfg.paired.resamples <= C.MAX_RESAMPLES


# ---- C: the dry run checks what the real run needs later

@pytest.mark.parametrize("edit,fld", [
    (lambda d: d["harness"].__setitem__("backend", "warp-drive"), "harness.backend"),
    (lambda d: d["harness"]["gates"]["paired"].__setitem__("confidence", math.nan), "harness.gates.paired.confidence"),
    (lambda d: d["harness"]["gates"]["paired"].__setitem__("resamples", 10_000_000_000_000),
     "harness.gates.paired.resamples"),
    (lambda d: d["harness"].__setitem__("dtype", "float8"), "harness.dtype"),
    (lambda d: d["harness"].__setitem__("device", "tpu"), "harness.device"),
    (lambda d: d["harness"].__setitem__("device", "cuda:x"), "harness.device"),
    (lambda d: d["harness"].__setitem__("scheme", "nvfp5"), "harness.scheme"),
    (lambda d: (d["tasks"][0].__setitem__("name", "tiny_add_mcq"), d["harness"]["gates"]["paired"].pop("allowances")),
     "tasks[0].name"),
    (lambda d: d["harness"]["gates"]["paired"]["allowances"].__setitem__("tiny_add_gne:exact_match,none", 0.1),
     "harness.gates.paired.allowances.tiny_add_gne:exact_match,none"),
    (lambda d: d["harness"]["gates"]["paired"].__setitem__("metrics", ["nope:acc"]), "harness.gates.paired.metrics"),
])
def test_dry_run_refuses_what_the_run_would_crash_on(tmp_path, capsys, edit, fld):
    data = tiny_data()
    edit(data)
    path = write(tmp_path, data)
    rc, out = dry_run(path, capsys=capsys)
    assert rc == 2
    assert f": {fld}: " in one_line_error(out, path)


@pytest.mark.parametrize("limit", ["0", "-5", "nan", "inf", "1.5", "abc", "1e400"])
def test_eval_limit_must_be_a_count_or_a_fraction(capsys, limit):
    rc, out = dry_run(TINY, "--limit", limit, capsys=capsys)
    assert rc == 2
    line = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(line) == 1 and "--limit" in line[0] and "Traceback" not in out.err, out.err


def test_eval_limit_fraction_and_count_are_accepted(capsys):
    for limit, expect in (("0.5", 0.5), ("7", 7)):
        rc, out = dry_run(TINY, "--limit", limit, capsys=capsys)
        assert rc == 0, out.err
        assert json.loads(out.out)["limit"] == expect


def test_unwritable_report_root_is_one_line(tmp_path, capsys, monkeypatch):
    a_file = tmp_path / "f"
    a_file.write_text("")
    monkeypatch.setattr("harness.lmeval.evaluate.run_config", lambda *a, **k: pytest.fail("the run started"))
    for root in (a_file, a_file / "sub"):
        rc = cli.main(["eval", "--config", str(TINY), "--reports", str(root), "--limit", "1"])
        out = capsys.readouterr()
        assert rc == 2 and f"--reports {root}" in out.err and "Traceback" not in out.err


def test_dry_run_imports_neither_torch_nor_lm_eval():
    code = ("import sys; from harness import cli; rc = cli.main(['eval', '--config', *sys.argv[1:], '--dry-run']);"
            "print(rc, [m for m in ('torch', 'lm_eval', 'transformers', 'numpy') if m in sys.modules])")
    # a bundled config (plan printed), vLLM's config with an absent model, and with the bundled model and a
    # scheme (its gsm8k data looked up in lm-eval's registry and the caches: refused, exit 2)
    for argv, rc in (([str(TINY)], 0), ([str(VLLM_EXAMPLE)], 2),
                     ([str(VLLM_EXAMPLE), "--model", "tiny-moe", "--scheme", "nvfp4"], 2)):
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO,
                           env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, timeout=120)
        assert r.stdout.strip().splitlines()[-1] == f"{rc} []", r.stdout + r.stderr


# ---- E: good input accepted

def test_vllm_driver_keys_are_known_and_reported_as_not_applied(tmp_path, capsys):
    data = yaml.safe_load(VLLM_EXAMPLE.read_text())
    data.update(env_vars={"VLLM_USE_DEEP_GEMM": "0"}, moe_backend="triton", required_gpu_arch=["gfx942", "gfx950"],
                tokenizer_mode="mistral", rocm_safetensors_load_strategy="eager")
    data["tasks"] = [{"name": "tiny_add_gen", "metrics": [{"name": "exact_match", "value": 0.6}]}]  # data on hand
    path = write(tmp_path, data)
    cfg = C.load(path)
    assert cfg.warnings == []
    rc, out = dry_run(path, "--model-optional", capsys=capsys)
    assert rc == 0, out.err
    assert "unknown top-level key" not in out.err
    plan = json.loads(out.out)
    assert {"env_vars", "moe_backend", "required_gpu_arch", "tokenizer_mode",
            "rocm_safetensors_load_strategy"} <= set(plan["vllm_keys_not_applied"])


@pytest.mark.parametrize("key,value", [("env_vars", ["A=1"]), ("required_gpu_arch", "gfx942"), ("moe_backend", 3)])
def test_vllm_driver_keys_of_the_wrong_type_are_refused(tmp_path, key, value):
    data = dict(yaml.safe_load(VLLM_EXAMPLE.read_text()), **{key: value})
    with pytest.raises(C.ConfigError) as e:
        C.load(write(tmp_path, data))
    assert e.value.field == key


def test_fractional_limit_is_accepted_and_counted_as_lm_eval_does(tmp_path):
    data = tiny_data()
    data["limit"] = 0.5
    assert C.load(write(tmp_path, data)).limit == 0.5
    assert report.items_for(0.5, 600) == 300
    assert report.items_for(0.001, 600) == 1          # lm-eval rounds up
    assert report.items_for(250, 600) == 250 and report.items_for(None, 600) == 600


def test_lm_eval_task_names_load_and_misspelt_ones_are_an_error(tmp_path):
    cfg = C.load(VLLM_EXAMPLE)   # gsm8k: in lm-eval's registry (its data is checked by the dry run)
    assert cfg.warnings == [] and cfg.notes == []
    data = yaml.safe_load(VLLM_EXAMPLE.read_text())
    data["tasks"][0]["name"] = "gsm8kk"
    with pytest.raises(C.ConfigError, match="unknown task 'gsm8kk'; did you mean 'gsm8k'") as e:
        C.load(write(tmp_path, data))
    assert e.value.field == "tasks[0].name"


# ---- B: hostile files, one line, exit 2

def test_duplicate_keys_are_a_warning_with_both_lines(tmp_path, capsys):
    text = TINY.read_text()
    path = tmp_path / "dup.yaml"
    path.write_text(text + "rtol: 0.06\n")
    first = 1 + text.splitlines().index("rtol: 0.05")
    last = len(text.splitlines()) + 1
    cfg = C.load(path)
    assert cfg.rtol == 0.06                       # last one wins, as in vLLM's reader
    rc, out = dry_run(path, capsys=capsys)
    assert rc == 0
    assert f"key 'rtol' appears twice, at lines {first} and {last}" in out.err


HOSTILE = {
    "utf16": lambda t: t.encode("utf-16"),
    "utf16_no_bom": lambda t: t.encode("utf-16-le"),
    "nul_byte": lambda t: t.encode()[:50] + b"\x00" + t.encode()[50:],
    "latin1_byte": lambda t: t.encode()[:50] + b"\xff" + t.encode()[50:],
    "binary": lambda t: bytes(range(256)) * 4,
    "deep": lambda t: ("tasks: " + "[" * 500 + "]" * 500 + "\n").encode(),
    "very_deep": lambda t: ("tasks: " + "[" * 100_000 + "\n").encode(),
    "deep_block": lambda t: ("".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v\n").encode(),
    "alias_bomb_tasks": lambda t: (alias_bomb() + "model_name: m\ntasks: *a9\n").encode(),
    "recursive_alias": lambda t: b"model_name: m\ntasks: &t [*t]\n",
    "oversize": lambda t: (t + "#" + "x" * (safe_yaml.MAX_BYTES + 10) + "\n").encode(),
    "many_tasks": lambda t: ("model_name: m\ntasks:\n" + "- {name: tiny_add_mc, metrics: [{name: acc, value: 1}]}\n"
                             * 200_000).encode(),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_config_files_are_refused_in_one_line(tmp_path, capsys, kind):
    path = tmp_path / f"{kind}.yaml"
    path.write_bytes(HOSTILE[kind](TINY.read_text()))
    rc, out = dry_run(path, capsys=capsys)
    assert rc == 2
    one_line_error(out, path)


def test_an_alias_bomb_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    built = []
    real = yaml.constructor.BaseConstructor.construct_object
    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_object",
                        lambda self, node, deep=False: built.append(1) or real(self, node, deep))
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb() + "model_name: m\ntasks: *a9\n")   # 10**10 nodes once expanded
    with pytest.raises(C.ConfigError, match="aliases expand to more than"):
        C.load(path)
    assert built == []
    # the same anchors within the limit load (and are built)
    assert safe_yaml.loads(alias_bomb(levels=2)).data["a2"][0][0] == ["x"] * 10
    assert built


def test_safe_yaml_counts_expanded_nodes_exactly():
    # {a: [x, x], b: *a}: mapping 1 + keys 2 + two lists of 3 nodes each
    assert safe_yaml.loads("a: &l [x, x]\nb: *l\n").nodes == 1 + 2 + 3 + 3
    assert safe_yaml.loads("a: &l [x, x]\nb: *l\n").depth == 2


def test_parse_of_odd_keys_never_raises_anything_but_config_error(tmp_path):
    for data in ({1: "a", "b": 2}, {"model_name": "m", "tasks": [{"name": "tiny_add_mc",
                 "metrics": [{"name": "acc", "value": 1}]}], "harness": {1: 2, "x\ny": 3}}):
        with pytest.raises(C.ConfigError) as e:
            C.parse(copy.deepcopy(data), tmp_path / "x.yaml")
        assert "\n" not in str(e.value)


def test_parse_limit_takes_numbers_from_python_too():
    from harness.commands.eval import parse_limit

    assert parse_limit(0.5) == 0.5 and parse_limit(7) == 7 and parse_limit("0.25") == 0.25 and parse_limit(None) is None
    for bad in (0, -5, 1.5, True, math.nan):
        with pytest.raises(C.ConfigError):
            parse_limit(bad)
