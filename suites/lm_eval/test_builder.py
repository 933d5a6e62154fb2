"""The lm-eval adapter builds every scheme, the bf16 baseline included, with
harness.moe.build_emulated_moe; without harness.moe it fails, never
substituting another layer."""
import os
import subprocess
import sys
from pathlib import Path


from harness.emulation import builder
from harness.moe import SCHEMES, build_emulated_moe

ROOT = Path(__file__).resolve().parents[2]


def test_the_builder_is_harness_moe():
    fn = builder.emulation_builder()
    assert fn is build_emulated_moe
    assert builder.builder_source(fn) == "harness.moe.layer.build_emulated_moe"


def test_missing_harness_moe_is_an_import_error():
    """Without harness.moe the builder does not import: no other layer is substituted."""
    code = ("import sys; sys.modules['harness.moe'] = None\n"
            "try:\n    import harness.emulation.builder\nexcept ImportError as e:\n    print('ImportError', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.startswith("ImportError") and "harness.moe" in r.stdout, r.stdout + r.stderr


def test_activation_scales_follow_the_scheme_row():
    for name, row in SCHEMES.items():
        assert builder.needs_activation_scales(name) == row.needs_act_gscale
    assert builder.needs_activation_scales("bf16") is False
