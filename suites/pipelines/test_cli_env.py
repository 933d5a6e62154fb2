"""The `moe-harness` entry point bounds libgomp's spin-wait before torch loads
(harness/cli.py says why, with the measured figures) and leaves a value the
user set alone."""
import os
import subprocess
import sys

CODE = "import harness.cli, os; print(os.environ['GOMP_SPINCOUNT'])"


def _spincount(env_value=None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if env_value is not None:
        env["GOMP_SPINCOUNT"] = env_value
    return subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_cli_sets_a_short_spin_before_torch_loads():
    assert _spincount() == "10000"
    out = subprocess.run([sys.executable, "-c", "import sys, harness.cli; print('torch' in sys.modules)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"  # torch not imported yet: libgomp reads the variable when it loads


def test_a_user_value_wins():
    assert _spincount("123") == "123"
