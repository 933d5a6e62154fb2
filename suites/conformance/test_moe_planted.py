"""Each planted seed-class MoE layer (harness.conformance.moe.planted) is
failed by ITS check, on CPU, with a minimal problem (one token, one expert)
and the verdict "implementation wrong"; the command exits 1 and reports it."""
import dataclasses
import json
import re

import pytest

from harness import cli
from harness.conformance.moe import get_moe_implementation, run_moe_conformance

pytestmark = pytest.mark.usefixtures("one_thread")

# (planted layer, scheme, the check that must fail it, what the failure says)
PLANTED = [
    ("planted-double-qdq", "nvfp4", "double_qdq", r"^3 activation QDQ calls per forward"),
    ("planted-a1-scale", "nvfp4", "scale_use", r"output unchanged after a1_gscale x3 .*ignores w13_input_scale"),
    ("planted-weight-device", "w_mxfp4_a_mxfp4", "device", r"has no attribute 'weight'"),
    ("planted-host-sync", "w_mxfp8", "capture", r"Tensor.__bool__ \(host sync\)"),
    ("planted-dtype-skip", "w_mxfp4_a_mxfp6_e3m2", "silent_skip", r"^activation quantization skipped"),
    ("planted-global-scale-reciprocal", "nvfp4", "global_scale", r"per-expert global scales .* outside the derived"),
    ("planted-shared-weights", "w_mxfp4_a_mxfp4", "shared_weights", r"modified the weights it was given"),
    ("planted-ties-away", "w_mxfp4_a_mxfp4", "ties", r"^on exact ties"),
]


def one_cell(name):
    impl = get_moe_implementation(name)
    return dataclasses.replace(impl, routings=impl.routings[:1], activations=impl.activations[:1],
                               dtypes=impl.dtypes[:1])


@pytest.mark.parametrize("name,scheme,check,message", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_layer_failed_by_its_check(name, scheme, check, message):
    data = run_moe_conformance([one_cell(name)], schemes=[scheme])
    assert data["failed"]
    (r,) = [r for r in data["results"] if r["check"] == check]
    assert r["status"] == "fail", r
    assert re.search(message, r["message"]), r["message"]
    assert r["evidence"]["verdict"] == "implementation wrong"
    size = r["minimal_size"]
    assert (size["T"], size["E"], size["top_k"]) == (1, 1, 1), r["minimal_problem"]
    assert size["H"] <= 64 and size["I"] <= 64 and r["minimal_problem"].startswith("Problem(")


def test_command_reports_the_planted_failure(tmp_path, capsys):
    rc = cli.main(["conform", "--moe", "planted-host-sync", "--moe-schemes", "w_mxfp8", "--moe-checks",
                   "capture", "oracle", "--reports", str(tmp_path)])
    assert rc == 1
    out = capsys.readouterr().out
    assert "FAIL  planted-host-sync capture" in out and "oracle          pass 4" in out
    data = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert data["meta"]["seed"] == 0 and data["failed"]
    assert {r["status"] for r in data["results"] if r["check"] == "capture"} == {"fail"}
    summary = (tmp_path / "latest" / "summary.md").read_text()
    assert "`capture`" in summary and "minimal problem: `Problem('w_mxfp8'" in summary
    junit = (tmp_path / "latest" / "junit.xml").read_text()
    assert 'tests="8" failures="4"' in junit


@pytest.mark.parametrize("args,err", [
    (["--moe", "harness_unfused"], "did you mean 'harness-unfused'"),
    (["--moe", "harness-unfused", "--moe-checks", "oracl"], "unknown MoE check 'oracl'"),
    (["--moe", "harness-unfused", "--moe-schemes", "nvfp5"], "unknown MoE scheme 'nvfp5'"),
    (["--moe", "nosuchmodule:impl"], "cannot import module 'nosuchmodule'"),
    (["--moe", "harness-unfused", "--impl", "reference"], "--impl select quantizer runs"),
])
def test_bad_arguments_exit_2_naming_the_field(tmp_path, capsys, args, err):
    assert cli.main(["conform", *args, "--reports", str(tmp_path)]) == 2
    assert err in capsys.readouterr().err
