"""The downstream example of docs/conformance.md, run as another project's
test file would be: with the harness' own layer as `build_my_moe` it passes;
with a planted bug (host sync in forward) it fails naming the check and the
minimal problem."""
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- moe-fixture-example"
IMPORT = "from mypkg.moe import build_my_moe"


def example() -> str:
    doc = (ROOT / "docs" / "conformance.md").read_text()
    block = doc[doc.index(MARK):].split("```python\n", 1)[1].split("```", 1)[0]
    assert IMPORT in block and len(block.strip().splitlines()) <= 11, block
    return block


def _run(tmp_path, build_import: str):
    (tmp_path / "test_downstream.py").write_text(example().replace(IMPORT, build_import))
    # Where the package's pytest11 entry point is installed pytest loads the
    # plugin itself (and a second -p would be refused); else load it by name.
    installed = any(ep.value == "harness.conformance.pytest_plugin" for ep in metadata.entry_points(group="pytest11"))
    load = [] if installed else ["-p", "harness.conformance.pytest_plugin"]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *load, "--rootdir",
                           str(tmp_path), str(tmp_path / "test_downstream.py")], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})


@pytest.mark.slow  # a pytest subprocess: imports torch and runs four cells
@pytest.mark.parametrize("build,passes", [
    ("from harness.conformance.moe.layers import build_unfused as build_my_moe", True),
    ("from harness.conformance.moe.planted import host_sync\nbuild_my_moe = host_sync().build", False),
], ids=["harness-layer-passes", "planted-host-sync-fails"])
def test_downstream_example(tmp_path, build, passes):
    r = _run(tmp_path, build)
    if passes:
        assert r.returncode == 0, r.stdout[-3000:]
    else:
        assert r.returncode == 1, r.stdout[-3000:]
        assert "my-moe capture [nvfp4" in r.stdout and "minimal problem: Problem('nvfp4'" in r.stdout, r.stdout[-3000:]
