"""GPU agents and downstream installs may lack the optional extras (lm-eval,
torchao, vLLM, the producer libraries, the architecture tools): every test
module must then skip with the reason, never fail to collect. Collected here
in a subprocess whose imports of those packages raise ModuleNotFoundError."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = ("lm_eval", "torchao", "vllm", "modelopt", "quark", "compressed_tensors", "llmcompressor",
            "grimp", "importlinter", "mypy")

BLOCKER = f'''import sys
OPTIONAL = {OPTIONAL!r}
class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Missing())
'''


def _collect(tmp_path, *args) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_every_module_collects_without_the_optional_extras(tmp_path):
    r = _collect(tmp_path, "suites")
    errors = [line for line in r.stdout.splitlines() if line.startswith("ERROR")]
    assert r.returncode == 0 and not errors, "\n".join(errors) or r.stdout[-3000:] + r.stderr[-2000:]


def test_a_module_importing_an_extra_unguarded_is_caught(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "test_probe.py").write_text("import lm_eval\n\n\ndef test_x():\n    assert lm_eval\n")
    r = _collect(tmp_path, str(probe), "--rootdir", str(probe))
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stdout + r.stderr
