"""`moe-harness targets` interrupted (SIGINT, SIGTERM to the command alone): its
compile workers get SIGTERM, the grace period, SIGKILL; one line, exit 130 /
143, no traceback, no worker left running."""
import signal

import pytest

from suites.interrupting import interrupt, marked, one_line, start, wait_until


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_targets_interrupted(tmp_path, sig, code):
    p = start(["targets", "--no-cache", "--reports", str(tmp_path), "--jobs", "2", "--targets", "gfx942,sm_90"])
    wait_until(lambda: len(marked(p.mark)) >= 3, p, "the compile workers started")  # the command and 2 workers
    rc, out, err, alive = interrupt(p, sig)
    assert rc == code, (rc, out, err)
    assert sig.name in one_line(err, "moe-harness targets: interrupted")
    assert alive == [], "a compile worker outlived the command"
