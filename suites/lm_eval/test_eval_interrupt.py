"""`moe-harness eval` interrupted (SIGINT, SIGTERM to the command alone): one
line, exit 130 / 143, no traceback, its report folder holds a report marked
interrupted, and nothing it started is left running."""
import json
import signal
from pathlib import Path

import pytest

from suites.interrupting import interrupt, one_line, start, wait_until

CONFIG = Path(__file__).resolve().parent / "configs" / "tiny-nvfp4.yaml"


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_eval_interrupted(tmp_path, sig, code):
    reports = tmp_path / "reports"
    p = start(["eval", "--config", str(CONFIG), "--reports", str(reports)])
    # mid-run: its report folder exists and the first phase has begun
    wait_until(lambda: list(reports.glob("*-eval")) and p.stdout.readline(), p, "the evaluation started")
    rc, out, err, alive = interrupt(p, sig)
    assert rc == code, (rc, out, err)
    assert f"interrupted by {sig.name}" in one_line(err, f"moe-harness eval {CONFIG}")
    assert alive == []
    (run,) = reports.glob("*-eval")
    meta = json.loads((run / "results.json").read_text())["meta"]
    assert meta["interrupted"] is True and meta["signal"] == sig.name
