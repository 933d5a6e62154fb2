"""Pipelines and the CLI as input: hostile pipeline files refused in one line
(exit 2), duplicate keys refused, `steps` missing named, parallelism <= 0 caught,
the [files] lint reading commands with a shell lexer and never leaving the
checkout, and one-line exit-2 errors for bad command-line values."""

import argparse
import os
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.util import safe_yaml
from harness.pipelines import lints, model, shell_refs
from harness.commands import pipeline as command
from suites.hostile_yaml import alias_bomb

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LINT_DIR = HERE / "fixtures" / "lint"
GOOD = LINT_DIR / "good.yml"


def run_cli(*argv) -> int:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return command.main(parser.parse_args(list(argv)))


def one_line(text: str, path) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert str(path) in lines[0] and "Traceback" not in text
    return lines[0]


def cpu_step(**extra) -> dict:
    step = {"label": "cpu-unit", "key": "cpu-unit", "agents": {"queue": "cpu"}, "timeout_in_minutes": 10,
            "command": ["true"], "artifact_paths": ["reports/**/*"],
            "retry": {"automatic": [{"exit_status": -1, "limit": 2}, {"exit_status": 255, "limit": 2}]}}
    step.update(extra)
    return step


# ---- B: hostile files

HOSTILE = {
    "utf16": lambda t: t.encode("utf-16"),
    "utf32": lambda t: t.encode("utf-32"),
    "nul_byte": lambda t: t.encode()[:40] + b"\x00" + t.encode()[40:],
    "bad_utf8": lambda t: t.encode()[:40] + b"\xc3\x28" + t.encode()[40:],
    "binary": lambda t: bytes(range(256)) * 8,
    "deep": lambda t: ("steps: " + "[" * 900 + "]" * 900 + "\n").encode(),
    "deep_mapping": lambda t: ("steps:\n- " + "{a: " * 300 + "1" + "}" * 300 + "\n").encode(),
    "alias_bomb_steps": lambda t: (alias_bomb() + "steps: *a9\n").encode(),
    "recursive_alias": lambda t: b"steps: &s [*s]\n",
    "oversize": lambda t: (t + "# " + "y" * (safe_yaml.MAX_BYTES + 1) + "\n").encode(),
    "duplicate_top_key": lambda t: (t + "steps: []\n").encode(),
    "duplicate_step_key": lambda t: t.replace("    key: cpu-unit\n", "    key: cpu-unit\n    key: cpu-other\n", 1).encode(),
    "no_steps": lambda t: b"env: {A: 1}\n",
    "steps_not_a_list": lambda t: b"steps: 3\n",
    "not_a_mapping": lambda t: b"just a string\n",
    "tab_indent": lambda t: b"steps:\n\t- command: x\n",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_pipeline_files_exit_2_in_one_line(tmp_path, capsys, kind):
    path = tmp_path / f"{kind}.yml"
    path.write_bytes(HOSTILE[kind](GOOD.read_text()))
    rc = run_cli("validate", str(path), "--root", str(LINT_DIR))
    out = capsys.readouterr()
    assert rc == 2
    one_line(out.out + out.err, path)
    rc = run_cli("run", str(path), "--target", "cpu", "--root", str(tmp_path), "--dry-run")
    out = capsys.readouterr()
    assert rc == 2
    one_line(out.out + out.err, path)


def test_missing_steps_is_named_missing(tmp_path):
    path = tmp_path / "p.yml"
    path.write_text("env: {A: 1}\n")
    with pytest.raises(model.PipelineError, match="`steps` is missing"):
        model.load(path)
    path.write_text("steps: {a: 1}\n")
    with pytest.raises(model.PipelineError, match="`steps` must be a list, not dict"):
        model.load(path)


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    text = GOOD.read_text()
    first = 1 + text.splitlines().index("    key: cpu-unit")
    path = tmp_path / "dup.yml"
    path.write_text(HOSTILE["duplicate_step_key"](text).decode())
    with pytest.raises(model.PipelineError, match=f"key 'key' appears twice, at lines {first} and {first + 1}"):
        model.load(path)


def test_deep_nesting_is_refused_by_depth(tmp_path):
    path = tmp_path / "deep.yml"
    path.write_text("steps: " + "[" * (safe_yaml.MAX_DEPTH + 5) + "]" * (safe_yaml.MAX_DEPTH + 5) + "\n")
    with pytest.raises(model.PipelineError, match=f"nested deeper than {safe_yaml.MAX_DEPTH} levels"):
        model.load(path)


# ---- D: parallelism <= 0 is not a silent success

@pytest.mark.parametrize("value", [0, -2])
def test_parallelism_below_one_is_a_finding_and_refused_by_run(tmp_path, capsys, value):
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump({"steps": [cpu_step(parallelism=value)]}))
    p = model.load(path)
    found = [str(x) for x in lints.lint(p, tmp_path)]
    assert any(f"parallelism: {value}; must be an integer >= 1" in f for f in found), found
    assert run_cli("validate", str(path), "--root", str(tmp_path)) == 1
    capsys.readouterr()
    rc = run_cli("run", str(path), "--target", "cpu", "--root", str(tmp_path))
    out = capsys.readouterr()
    assert rc == 2 and "parallelism" in one_line(out.err, path)
    assert not (tmp_path / "reports").exists()  # nothing ran


def test_pipeline_run_jobs_below_one_is_refused(capsys):
    assert run_cli("run", str(GOOD), "--target", "cpu", "--jobs", "0") == 2
    assert "--jobs 0" in capsys.readouterr().err


# ---- E: the [files] lint on vLLM's release pipeline commands

def _checkout(tmp_path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "meta.sh").write_text("echo x\n")
    (root / "vllm").mkdir()  # the image name's first part exists as a folder, as in vLLM
    (root / ".git").mkdir()
    return root


@pytest.mark.parametrize("cmd", [
    "echo $(bash scripts/meta.sh)",
    "bash scripts/meta.sh vllm/vllm-openai-cpu",
    "mkdir -p scripts/gen && touch scripts/gen/.keep && ls scripts/gen/.keep",
    "python3 scripts/gen.py > scripts/out.json; cat scripts/out.json",
    "docker push vllm/vllm-openai-cpu:nightly",
    "cp scripts/meta.sh scripts/copy.sh && bash scripts/copy.sh",
])
def test_release_pipeline_commands_give_no_false_findings(tmp_path, cmd):
    root = _checkout(tmp_path)
    if "gen.py" in cmd:
        (root / "scripts" / "gen.py").write_text("")
    path = root / "p.yml"
    path.write_text(yaml.safe_dump({"steps": [cpu_step(command=[cmd])]}))
    found = [str(x) for x in lints.referenced_files(model.load(path), root)]
    assert found == []


@pytest.mark.parametrize("cmd,missing", [
    ("echo $(bash scripts/nope.sh)", "scripts/nope.sh"),
    ("bash scripts/nope.sh vllm/vllm-openai-cpu", "scripts/nope.sh"),
    ("ls `cat scripts/list.txt`", "scripts/list.txt"),
    ("FOO=1 timeout 5m python -m pytest scripts/test_x.py::test_a -q", "scripts/test_x.py"),
    ("python3 scripts/gen.py out.json < scripts/input.json", "scripts/gen.py"),
    ("./scripts/run.sh --fast", "./scripts/run.sh"),
])
def test_missing_files_in_path_position_are_still_found(tmp_path, cmd, missing):
    root = _checkout(tmp_path)
    path = root / "p.yml"
    path.write_text(yaml.safe_dump({"steps": [cpu_step(command=[cmd])]}))
    found = [str(x) for x in lints.referenced_files(model.load(path), root)]
    assert any(f"'{missing}'" in f for f in found), found


def test_path_refs_position_rules():
    assert shell_refs.path_refs(["bash scripts/a.sh vllm/img other/file"]) == ["scripts/a.sh"]
    assert shell_refs.path_refs(["python -c 'print(1)' x/y.py"]) == []
    assert shell_refs.path_refs(["pytest suites/lm_eval -k x"]) == ["suites/lm_eval"]
    assert shell_refs.path_refs(["make test PYTEST_ARGS=\"--ignore=suites/properties a/b.py\""]) == ["a/b.py"]
    assert shell_refs.path_refs(["tee out/log.txt < in/x.txt", "cat out/log.txt"]) == ["in/x.txt"]
    with pytest.raises(ValueError):
        shell_refs.path_refs(["echo 'unbalanced"])


def test_globs_never_walk_outside_the_checkout(tmp_path, monkeypatch):
    root = _checkout(tmp_path)
    path = root / "p.yml"
    path.write_text(yaml.safe_dump({"steps": [cpu_step(command=[
        "python /**/x.py", "cat ../../**/*.py", "ls ~/**/*.sh", "pytest scripts/**/test_nope.py"])]}))
    pipe = model.load(path)
    walked = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p=".": walked.append(Path(p)) or real(p))
    found = [str(x) for x in lints.referenced_files(pipe, root)]
    assert found and all("scripts/**/test_nope.py" in f for f in found), found
    assert walked, "the in-checkout glob was not looked up at all"
    outside = [w for w in walked if not (w if w.is_absolute() else root / w).resolve().is_relative_to(root.resolve())]
    assert outside == []


def test_globs_resolve_against_the_checkout_whatever_the_current_folder(tmp_path, monkeypatch, capsys):
    root = _checkout(tmp_path)
    path = root / "p.yml"
    path.write_text(yaml.safe_dump({"steps": [cpu_step(command=["bash scripts/*.sh", "cat scripts/nope*.sh"])]}))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "scripts").mkdir(parents=True)
    (elsewhere / "scripts" / "nope1.sh").write_text("")  # would satisfy the glob if cwd were used
    for cwd in (elsewhere, root / "scripts", tmp_path):
        monkeypatch.chdir(cwd)
        assert run_cli("validate", str(path)) == 1        # default root: the checkout holding the file
        out = capsys.readouterr().out
        assert "'scripts/nope*.sh', which matches no file" in out and "scripts/*.sh" not in out
        assert run_cli("validate", os.path.relpath(path, cwd), "--root", os.path.relpath(root, cwd)) == 1
        capsys.readouterr()


def test_shipped_pipelines_validate_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run_cli("validate", *map(str, sorted((REPO / "buildkite").glob("*.yml")))) == 0, capsys.readouterr().out


# ---- D: junit-annotate and `moe-harness run` arguments

@pytest.mark.parametrize("time_attr", ["abc", "nan", "-1", "inf"])
def test_junit_time_that_is_not_seconds_is_one_line(tmp_path, capsys, time_attr):
    xml = tmp_path / "a.xml"
    xml.write_text(f'<testsuite><testcase classname="c" name="t" time="{time_attr}"/></testsuite>')
    rc = run_cli("junit-annotate", str(tmp_path / "*.xml"))
    out = capsys.readouterr()
    assert rc == 2 and f"time='{time_attr}'" in one_line(out.err, xml)


def _run_main(*argv) -> int:
    return cli.main(["run", *argv])


def test_run_device_cuda_without_a_gpu_is_one_line(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = _run_main("--device", "cuda", "--reports", str(tmp_path / "r"))
    err = capsys.readouterr().err
    assert rc == 2 and "device 'cuda' requested" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv,text", [
    (["--device", "foo"], "unknown device 'foo'"),
    (["--device", "cuda:x"], "unknown device 'cuda:x'"),
    (["--only", "formats", "--skip", "formats"], "leave no section to run"),
    (["--only", "moe", "--only", "formats", "--skip", "formats", "--skip", "moe"], "both name formats, moe"),
])
def test_run_arguments_that_run_nothing_are_one_line(tmp_path, capsys, argv, text):
    rc = _run_main(*argv, "--reports", str(tmp_path / "r"))
    err = capsys.readouterr().err
    assert rc == 2 and text in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


def test_run_reports_on_a_file_is_one_line(tmp_path, capsys):
    a_file = tmp_path / "f"
    a_file.write_text("")
    for reports in (a_file, a_file / "sub"):
        rc = _run_main("--only", "formats", "--reports", str(reports))
        err = capsys.readouterr().err
        assert rc == 2 and f"--reports {reports}" in err and len(err.strip().splitlines()) == 1, err

