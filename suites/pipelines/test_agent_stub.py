"""The buildkite-agent stand-in: what it does, and that it refuses what it cannot do."""

import json

from harness.pipelines import agent_stub


def test_unsupported_subcommand_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_PIPELINE_RUN_DIR", str(tmp_path))
    assert agent_stub.main(["pipeline", "upload", "x.yml"]) == 1
    assert "'pipeline' is not available locally" in capsys.readouterr().err


def test_meta_data_round_trip(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_PIPELINE_RUN_DIR", str(tmp_path))
    assert agent_stub.main(["meta-data", "set", "scheme", "nvfp4"]) == 0
    assert agent_stub.main(["meta-data", "exists", "scheme"]) == 0
    assert agent_stub.main(["meta-data", "exists", "other"]) == 100
    capsys.readouterr()
    assert agent_stub.main(["meta-data", "get", "scheme"]) == 0
    assert capsys.readouterr().out == "nvfp4"
    assert json.loads((tmp_path / "meta-data.json").read_text()) == {"scheme": "nvfp4"}


def test_annotate_appends_per_context(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_PIPELINE_RUN_DIR", str(tmp_path))
    agent_stub.main(["annotate", "one ", "--context", "c", "--style", "error"])
    agent_stub.main(["annotate", "two", "--context", "c", "--append"])
    assert (tmp_path / "annotations" / "c.md").read_text() == "one two"


def test_upload_copies_into_the_step_folder(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    (root / "reports" / "junit").mkdir(parents=True)
    (root / "reports" / "junit" / "a.xml").write_text("<testsuites/>")
    monkeypatch.setenv("HARNESS_PIPELINE_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("HARNESS_PIPELINE_ARTIFACTS", str(tmp_path / "run" / "artifacts" / "cpu-unit"))
    monkeypatch.setenv("BUILDKITE_BUILD_CHECKOUT_PATH", str(root))
    assert agent_stub.main(["artifact", "upload", "reports/junit/*.xml"]) == 0
    assert (tmp_path / "run" / "artifacts" / "cpu-unit" / "reports" / "junit" / "a.xml").is_file()
    monkeypatch.chdir(tmp_path)
    assert agent_stub.main(["artifact", "download", "reports/**/*.xml", "dl"]) == 0
    assert (tmp_path / "dl" / "reports" / "junit" / "a.xml").is_file()
    assert agent_stub.main(["artifact", "download", "nothing/*.bin", "dl"]) == 1


def test_annotate_context_cannot_leave_the_run_folder(tmp_path, monkeypatch, capsys):
    run = tmp_path / "a" / "b" / "run"
    run.mkdir(parents=True)
    monkeypatch.setenv("HARNESS_PIPELINE_RUN_DIR", str(run))
    for context in ("../../..", "../x", "/etc/x", "a/b", ".hidden", ".."):
        before = sorted(p for p in tmp_path.rglob("*"))
        assert agent_stub.main(["annotate", "body", "--context", context]) == 1, context
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--context" in err and "Traceback" not in err
        assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written anywhere
    assert agent_stub.main(["annotate", "ok", "--context", "lint-results_v2.1"]) == 0
    assert (run / "annotations" / "lint-results_v2.1.md").read_text() == "ok"


def test_upload_skips_files_outside_the_checkout(tmp_path, monkeypatch, capsys):
    root = tmp_path / "checkout"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("x")
    monkeypatch.setenv("HARNESS_PIPELINE_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("HARNESS_PIPELINE_ARTIFACTS", str(tmp_path / "run" / "artifacts" / "s"))
    monkeypatch.setenv("BUILDKITE_BUILD_CHECKOUT_PATH", str(root))
    assert agent_stub.main(["artifact", "upload", "../secret.txt"]) == 0
    assert "outside the checkout" in capsys.readouterr().err
    assert not (tmp_path / "run" / "artifacts").exists() or not any((tmp_path / "run" / "artifacts").rglob("*.txt"))
