"""User implementations with planted bugs, given by `--impl module:object`, are
caught: unexplained, shrunk to a small block, verdict "implementation wrong"."""
import json

import pytest

from harness import cli
from harness.conformance import verdict as vd


def _run(tmp_path, *impls, formats="mxfp4"):
    args = ["conform", "--formats", formats, "--reports", str(tmp_path), "--random-blocks", "32"]
    for i in impls:
        args += ["--impl", i]
    rc = cli.main(args)
    data = json.loads((tmp_path / "latest" / "results.json").read_text())
    return rc, data


@pytest.mark.parametrize("impl,stage", [
    ("suites.conformance.planted:ties_away", "codes"),
    ("suites.conformance.planted:scale_low", "scales"),
])
def test_planted_bug_reported_with_minimal_block(tmp_path, impl, stage):
    rc, data = _run(tmp_path, impl)
    assert rc == 1 and data["failed"]
    cell = next(c for c in data["cells"] if c["dtype"] == "float32")
    st = cell["stages"][stage]
    assert st["unexplained_blocks"] > 0 and st["match_rate"] < 1.0
    f = next(f for f in st["findings"] if f["explained_by"] is None)
    assert f["reproduces_alone"] and len(f["minimal"]) <= 32
    assert 1 <= f["nonzero"] <= 2, f["minimal"]
    assert f["verdict"] == vd.IMPL_WRONG
    if stage == "codes":
        # ties away: one element alone, e.g. 1.25 (scale 2^-2, quotient 5, a tie
        # between 4 and 6): the spec's even code is 6 (0b110), away gives 7.
        i = next(i for i, v in enumerate(f["minimal"]) if v != 0)
        assert f["spec"][i] & 7 == 6 and f["impl"][i] & 7 == 7
    else:
        # scale one byte low: amax exactly a power of two, e.g. 1.0 alone.
        assert abs(max(f["minimal"], key=abs)) in (1.0, 2.0)
        assert f["impl"][0] == f["spec"][0] - 1
    summary = (tmp_path / "latest" / "summary.md").read_text()
    assert "UNEXPLAINED" in summary and (tmp_path / "latest" / "heatmap.png").stat().st_size > 0


def test_unknown_impl_suggests_names(tmp_path, capsys):
    rc = cli.main(["conform", "--impl", "torchao_mx", "--reports", str(tmp_path)])
    assert rc == 2
    assert "did you mean 'torchao-mx'" in capsys.readouterr().err
