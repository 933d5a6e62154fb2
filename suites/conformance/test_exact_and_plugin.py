"""The exact-arithmetic spec agrees with the (trusted) reference on drawn
blocks; verdicts; the pytest plugin's `conformance.check`."""
import math
import subprocess
import sys
from fractions import Fraction
from importlib import metadata
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import harness.formats as hf
import harness.strategies as hs
from harness.conformance import exact, verdict as vd

ROOT = Path(__file__).resolve().parents[2]


@given(data=st.data())
def test_exact_model_agrees_with_reference(data):
    case = data.draw(hs.block_tensors(max_rows=1, max_blocks=1, allow_nan_inf=True))
    spec = hf.FORMATS[case.fmt]
    mode = data.draw(hs.scale_modes()) if spec.is_mx else "floor"
    rounding = data.draw(hs.roundings())
    gs = None if spec.is_mx else data.draw(st.sampled_from([1.0, 16.0, 0.25]))
    q = hf.quantize(case.x, case.fmt, mode, rounding, gs)
    y = hf.dequantize(q, case.x.dtype).flatten().tolist()
    xs = [float(v) for v in case.x.to(torch.float64).flatten()]
    want = exact.expected_block(xs, case.fmt, mode, rounding, gs, case.x.dtype)
    assert want["scales"] == q.scales.flatten().tolist()
    assert all(w is None or w == c for w, c in zip(want["codes"], q.codes.flatten().tolist()))
    assert all(exact.same_value(w, float(v)) for w, v in zip(want["qdq"], y))


def test_round_to_float_ties_and_overflow():
    assert exact.round_to_float(Fraction(1) + Fraction(1, 2 ** 24), torch.float32) == 1.0  # tie to even
    assert exact.round_to_float(Fraction(1) + Fraction(3, 2 ** 24), torch.float32) == 1.0 + 2 ** -22
    assert exact.round_to_float(Fraction(65520), torch.float16) == math.inf  # half-way past 65504
    assert exact.round_to_float(Fraction(2 ** -25), torch.float16) == 0.0  # tie with 0 -> even
    assert exact.round_to_float(Fraction(3, 2 ** 26), torch.float16) == 2 ** -24


def test_exact_scale_modes_at_thresholds():
    spec = hf.FORMATS["mxfp4"]  # emax 2, mbits 1, max_normal 6
    assert exact.mx_scale_byte(Fraction(4), spec, "floor") == 127
    assert exact.mx_scale_byte(Fraction(4), spec, "ceil") == 127
    assert exact.mx_scale_byte(Fraction(4) + Fraction(1, 2 ** 20), spec, "ceil") == 128
    assert exact.mx_scale_byte(Fraction(7), spec, "even") == 128  # 1.75 * 4 rounds to 2 * 4
    assert exact.mx_scale_byte(Fraction(6), spec, "rceil") == 127
    assert exact.mx_scale_byte(Fraction(6) + Fraction(1, 2 ** 20), spec, "rceil") == 128


def test_judge():
    assert vd.judge("codes", [7], [6], [6])["verdict"] == vd.IMPL_WRONG
    assert vd.judge("codes", [6], [7], [6])["verdict"] == vd.REF_WRONG
    assert vd.judge("codes", [5], [7], [6])["verdict"] == vd.BOTH_WRONG
    assert vd.judge("codes", [5], [7], [None])["verdict"] == vd.BOTH_ALLOWED


def test_plugin_check_passes_reference_and_names_the_minimal_block(conformance):
    conformance.check(lambda x: hf.qdq(x, "mxfp4", "even"), "mxfp4", "even", dtypes=(torch.float32,),
                      random_blocks=8)
    with pytest.raises(AssertionError, match="implementation wrong; minimal block"):
        conformance.check(lambda x: hf.qdq(x, "mxfp4", "floor", "away"), "mxfp4", "floor",
                          dtypes=(torch.float32,), random_blocks=8)


def test_plugin_loads_as_a_pytest_plugin(tmp_path):
    """The module works as a `-p` plugin in a foreign suite (what pytest11 loads)."""
    (tmp_path / "test_k.py").write_text(
        "import torch\nfrom suites.conformance.planted import ties_away_qdq\n"
        "def test_k(conformance, format_strategies):\n"
        "    assert hasattr(format_strategies, 'block_tensors')\n"
        "    conformance.check(ties_away_qdq, 'mxfp4', 'floor', dtypes=(torch.float32,), random_blocks=4)\n")
    # Where the package's pytest11 entry point is installed pytest loads the
    # plugin itself (and a second -p would be refused); else load it by name.
    installed = any(ep.value == "harness.conformance.pytest_plugin"
                    for ep in metadata.entry_points(group="pytest11"))
    load = [] if installed else ["-p", "harness.conformance.pytest_plugin"]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *load,
                        "--rootdir", str(tmp_path), str(tmp_path / "test_k.py")],
                       cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1 and "implementation wrong; minimal block" in r.stdout, r.stdout[-2000:]
