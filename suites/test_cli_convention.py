"""One command-line convention for every `moe-harness` command
(harness/commands/convention.py): every leaf subcommand takes --reports DIR,
-q and -v and lists the exit codes 0 / 1 / 2 / 130 / 143 in --help; every
invocation that does work writes <reports>/<timestamp>-<kind>/ with
results.json, summary.md and junit.xml, moves `latest`, and sends library
noise to third_party.log; bad input is one line, exit 2, and no folder;
`moe-harness --version` prints the version. The walk covers every subcommand
that exists, so a new one is held to it too."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="the walk loads every command, eval and bench eval need the [lmeval] extra")
from harness import __version__, cli
from harness.commands import convention

REPO = Path(__file__).resolve().parents[1]
CODES = (0, 1, 2, 130, 143)


def all_leaves():
    parser = cli.build_parser([], load_all=True)
    return list(convention.leaf_parsers(parser))


LEAVES = all_leaves()


def test_the_walk_covers_every_command_and_bench():
    words = {path[0] for path, _ in LEAVES}
    assert words == set(cli.COMMANDS) | {"bench"}
    assert {path[1] for path, _ in LEAVES if path[0] == "bench"} == set(cli.BENCHES)
    assert ("checkpoint", "make") in {p for p, _ in LEAVES} and ("pipeline", "validate") in {p for p, _ in LEAVES}


@pytest.mark.parametrize("path,parser", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_every_subcommand_takes_the_common_options_and_lists_the_exit_codes(path, parser):
    options = parser._option_string_actions
    for opt in ("--reports", "-q", "--quiet", "-v", "--verbose"):
        assert opt in options, (path, opt)
    text = parser.format_help()
    assert "exit codes:" in text
    listed = text.split("exit codes:")[1]
    for code in CODES:
        assert f"\n  {code} " in listed, (path, code, listed)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"moe-harness {__version__}"


def test_top_level_help_lists_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "exit codes:" in out and all(f"  {c} " in out for c in CODES)


def _reports_hold_one_run(root: Path, kind: str):
    runs = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
    assert len(runs) == 1, sorted(p.name for p in root.iterdir())
    run = runs[0]
    assert run.name.endswith(kind), run.name
    assert os.readlink(root / "latest") == run.name
    for name in ("results.json", "summary.md", "junit.xml"):
        assert (run / name).is_file(), (run, name)
    assert json.loads((run / "results.json").read_text())["results"]
    return run


# one cheap invocation per command that does work: (argv after --reports DIR, report kind, exit code)
def _pipeline_file(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("steps:\n  - label: ok\n    key: ok\n    command: 'true'\n")
    return f


def _synth(tmp_path):
    return ["checkpoint", "synth", "--shape", "tiny-moe", "--scheme", "nvfp4", "--out", str(tmp_path / "ck")]


CHEAP = {
    "checkpoint-synth": lambda t: (_synth(t), 0),
    "checkpoint-check": lambda t: (["checkpoint", "check", str(_made_synth(t))], None),
    "pipeline-validate": lambda t: (["pipeline", "validate", str(_pipeline_file(t)), "--root", str(t)], None),
    "conform": lambda t: (["conform", "--impl", "reference", "--formats", "mxfp8_e4m3", "--random-blocks", "4"], 0),
    "train-tiny": lambda t: (["train-tiny", "--out", str(t / "m"), "--steps", "2", "--threads", "1"], 0),
}


def _made_synth(tmp_path):
    from harness.checkpoints import synthetic

    out = tmp_path / "made"
    synthetic.write("tiny-moe", "nvfp4", out, seed=0, device="cpu")
    return out


@pytest.mark.parametrize("kind", sorted(CHEAP))
def test_each_command_writes_the_three_files_moves_latest_and_logs_noise(tmp_path, kind, capsys):
    argv, rc_want = CHEAP[kind](tmp_path)
    root = tmp_path / "reports"
    rc = cli.main([*argv, "--reports", str(root)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    if rc_want is not None:
        assert rc == rc_want, out.out + out.err
    else:
        assert rc in (0, 1), out.out + out.err
    run = _reports_hold_one_run(root, kind)
    junit = (run / "junit.xml").read_text()
    assert "<testcase" in junit


def test_library_noise_goes_to_third_party_log(tmp_path, capsys):
    """A warning raised inside a third-party module during a command lands in the log, not on screen."""
    import warnings

    class Noisy:
        OWN_REPORT = False

        @staticmethod
        def main(args):
            lib = os.path.join(sysconfig.get_paths()["purelib"], "fake_lib.py")   # a file of an installed library
            exec(compile("import warnings\nwarnings.warn('library chatter')", lib, "exec"), {"__name__": "fake_lib"})
            print("own line")
            return 0

    import argparse

    args = argparse.Namespace(reports=str(tmp_path), quiet=False, verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert convention.run_with_report(Noisy, args, ["noisy"]) == 0
    out = capsys.readouterr()
    run = _reports_hold_one_run(tmp_path, "noisy")
    assert "own line" in out.out and "library chatter" not in out.out + out.err
    assert "library chatter" in (run / "third_party.log").read_text()


def _cli_process(*argv, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")},
                          timeout=300)


@pytest.mark.parametrize("argv,needle", [
    (["checkpoint", "check", "/nonexistent"], "/nonexistent: checkpoint folder"),
    (["eval", "--config", "/nonexistent.yaml"], "/nonexistent.yaml"),
    (["targets", "--targets", "gfx90a"], "unknown target gfx90a"),
    (["conform", "--formats", "nvfp5"], "nvfp5"),
    (["bench", "config-validate", "--runs", "0"], "--runs 0"),
])
def test_bad_input_is_one_line_exit_2_and_no_report(tmp_path, argv, needle):
    root = tmp_path / "reports"
    r = _cli_process(*argv, "--reports", str(root))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".")], list(root.iterdir())


def test_expect_names_the_users_flag(tmp_path):
    folder = _made_synth(tmp_path)
    r = _cli_process("checkpoint", "check", str(folder), "--expect", "quark", "--reports", str(tmp_path / "r"))
    assert r.returncode == 1   # the folder fails the stated expectation: a finding, in the user's words
    assert r.stderr.strip() == f"moe-harness checkpoint check: --expect quark: {folder} holds a compressed-tensors checkpoint"


def test_docs_state_the_convention():
    text = (REPO / "docs" / "internal-api.md").read_text()
    assert "--reports DIR" in text and all(str(c) in text for c in CODES)
    assert "moe-harness --version" in (REPO / "README.md").read_text()


def test_every_subcommand_help_runs_in_a_fresh_process():
    """`--help` of each command imports and prints without error (the real entry point)."""
    for name in list(cli.COMMANDS):
        r = subprocess.run([sys.executable, "-m", "harness.cli", name, "--help"], capture_output=True, text=True,
                           cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300)
        assert r.returncode == 0 and "exit codes:" in r.stdout, (name, r.stderr[-2000:])


def test_checkpoint_make_is_not_silent_and_copies_to_out(tmp_path, monkeypatch, capsys):
    """A progress line every few seconds while the producer runs (its log's
    last line: the producer's phase), then the folder; --out gets a copy."""
    import time

    from harness.commands import checkpoint as cmd

    cache = tmp_path / "cache" / "abc"
    log = cache.parent / "abc.log"

    def slow_make(producer, scheme, force=False):
        cache.mkdir(parents=True)
        (cache / "model.safetensors").write_bytes(b"x")
        for phase in ("loading the model", "calibrating", "quantizing", "saving"):
            with open(log, "a") as f:
                f.write(f"{phase}\n")
            time.sleep(0.12)
        return cache

    monkeypatch.setattr(cmd, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(cmd, "cached_path", lambda producer, scheme: cache)
    monkeypatch.setattr(cmd, "make_checkpoint", slow_make)
    out = tmp_path / "out"
    rc = cli.main(["checkpoint", "make", "--producer", "gpt-oss", "--scheme", "mxfp4", "--out", str(out),
                   "--reports", str(tmp_path / "r")])
    got = capsys.readouterr()
    assert rc == 0 and got.out.strip() == str(out) and (out / "model.safetensors").read_bytes() == b"x"
    beats = [ln for ln in got.err.splitlines() if ln.startswith("      ")]
    assert any("calibrating" in ln for ln in beats) and any("quantizing" in ln for ln in beats), got.err
    rc = cli.main(["checkpoint", "make", "--producer", "gpt-oss", "--scheme", "mxfp4", "--out", str(out),
                   "--reports", str(tmp_path / "r")])
    assert rc == 2 and "--out" in capsys.readouterr().err   # not an empty folder
