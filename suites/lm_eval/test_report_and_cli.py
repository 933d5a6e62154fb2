"""run_tiny_all_schemes writes the report (raw JSON, summary.md, PNG);
`moe-harness eval` exits 0 only when every gate passes."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

from harness.lmeval.evaluate import run_tiny_all_schemes

ROOT = Path(__file__).resolve().parents[2]


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
                                     "--report-root", str(tmp_path / "reports")],
                                    capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert runs["good"].returncode == 0, runs["good"].stdout[-3000:]
    assert runs["bad"].returncode == 1 and "FAIL kl" in runs["bad"].stdout
    assert len(list((tmp_path / "reports").glob("*-eval/lm_eval/summary.md"))) == 2
