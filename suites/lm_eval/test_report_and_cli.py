"""run_tiny_all_schemes writes the report (raw JSON, summary.md, PNG);
`moe-harness eval` exits 0 only when every gate passes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.lmeval.evaluate import run_tiny_all_schemes

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_run_tiny_all_schemes_writes_report(tmp_path, eval_session):
    results = run_tiny_all_schemes(tmp_path, limit=12, schemes=["bf16", "w_mxfp8"], session=eval_session)
    assert [r["details"]["scheme"] for r in results] == ["bf16", "w_mxfp8"]
    assert all({"name", "passed", "details", "message"} <= set(r) for r in results)
    folder = tmp_path / "lm_eval"
    assert (folder / "summary.md").read_text().count("lm_eval/tiny-") >= 2
    assert (folder / "accuracy_kl.png").read_bytes()[:4] == b"\x89PNG"
    raw = json.loads((folder / "raw" / "tiny-w_mxfp8.json").read_text())
    assert "results" in raw["scheme"] and "per_item" in raw["scheme"]
    summary = json.loads((folder / "results.json").read_text())
    assert len(summary["results"]) == 2


@pytest.mark.slow
def test_eval_exit_codes(tmp_path):
    """A passing config exits 0; the same config with an impossible KL threshold exits 1."""
    cfg = yaml.safe_load((ROOT / "suites/lm_eval/configs/tiny-w_mxfp8.yaml").read_text())
    cfg["limit"] = 8
    cfg["harness"]["gates"]["kl"]["docs"] = 8       # thresholds below are for these 8 documents
    cfg["harness"]["gates"]["kl"]["max"] = 0.05
    cfg["tasks"][2]["metrics"][0]["value"] = None      # perplexity of 8 documents is not the 600-document one
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(cfg))
    cfg["harness"]["gates"]["kl"]["max"] = 1.0e-9
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HARNESS_TORCH_THREADS": "1",
           "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    runs = {}
    for name, path in (("good", good), ("bad", bad)):
        runs[name] = subprocess.run([sys.executable, "-m", "harness.cli", "eval", "--config", str(path), "--quiet",
                                     "--reports", str(tmp_path / "reports")],
                                    capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert runs["good"].returncode == 0, runs["good"].stdout[-3000:]
    assert runs["bad"].returncode == 1 and "FAIL kl" in runs["bad"].stdout
    assert len(list((tmp_path / "reports").glob("*-eval/lm_eval/summary.md"))) == 2


def test_each_scheme_is_a_check_reported_when_it_finishes(monkeypatch):
    """`moe-harness run` records every scheme the moment it finishes (nothing batched to the end)."""
    from harness.lmeval import evaluate

    events = []

    def fake_run_config(cfg, *, session, limit, progress):
        events.append(("run", cfg.scheme))
        progress(f"progress {cfg.scheme}")
        return {"name": f"lm_eval/{cfg.scheme}", "passed": True, "raw": {"big": 1}}

    monkeypatch.setattr(evaluate, "run_config", fake_run_config)
    out = evaluate.run_tiny_all_schemes(None, schemes=["w_mxfp8", "nvfp4"], write=False,
                                        on_result=lambda r: events.append(("result", r["name"], "raw" in r)),
                                        progress=lambda line: events.append(("progress", line)))
    assert events == [("run", "w_mxfp8"), ("progress", "progress w_mxfp8"), ("result", "lm_eval/w_mxfp8", False),
                      ("run", "nvfp4"), ("progress", "progress nvfp4"), ("result", "lm_eval/nvfp4", False)]
    assert [r["name"] for r in out] == ["lm_eval/w_mxfp8", "lm_eval/nvfp4"]


def test_progress_line_names_task_items_and_rate():
    from harness.lmeval.evaluate import _items_line

    out = {"n-samples": {"arc_easy": {"original": 2376, "effective": 200}, "hellaswag": {"original": 50, "effective": 50}}}
    assert _items_line("lm_eval/tiny-nvfp4", "nvfp4", out, 5.0) == (
        "      lm_eval/tiny-nvfp4: nvfp4 arc_easy 200/2376, hellaswag 50/50 items, 50.0 items/s in 5.0s")


def test_run_puts_the_lm_eval_cache_under_the_chosen_reports(monkeypatch, tmp_path):
    """--reports elsewhere: the hub/datasets cache goes there too, not to ./reports of the current folder."""
    from harness.commands import run
    from harness.lmeval import evaluate

    seen = {}
    monkeypatch.delenv("HARNESS_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(evaluate, "run_tiny_all_schemes",
                        lambda report_dir, on_result, progress, families, producers: seen.update(
                            cache=os.environ["HARNESS_CACHE_DIR"], families=families, producers=producers))
    run._lmeval_section({"report_dir": None, "reports_root": tmp_path / "elsewhere", "progress": print}, print)
    assert seen["cache"] == str(tmp_path / "elsewhere" / ".cache")
    assert seen["producers"] is True  # `moe-harness run` evaluates the producer checkpoints too
    assert seen["families"] is True  # and the tiny random family models


def test_producer_configs_follow_the_producer_table():
    from harness.checkpoints import producers
    from harness.lmeval.configs import config_paths

    paths = config_paths()
    assert len(paths) == sum(len(p.schemes) for p in producers.PRODUCERS.values()) >= 7
    assert all(p.is_file() for p in paths), [p for p in paths if not p.is_file()]
