"""`moe-harness checkpoint list | make | check`: exit codes and one-line messages."""
from harness import cli
from harness.checkpoints import producers

from suites.checkpoints.producer_checkpoints import made


def test_list_names_every_producer_and_whether_installed(capsys):
    assert cli.main(["checkpoint", "list"]) == 0
    out = capsys.readouterr().out
    for name in producers.PRODUCERS:
        assert name in out
    assert out.count("installed: ") + out.count("NOT AVAILABLE: ") == len(producers.PRODUCERS)


def test_make_unknown_scheme_is_a_usage_error(capsys):
    assert cli.main(["checkpoint", "make", "--producer", "quark", "--scheme", "mxfp8"]) == 2
    assert "has no scheme 'mxfp8'" in capsys.readouterr().err


def test_make_prints_the_cached_folder_and_check_proves_it(capsys):
    folder = made("gpt-oss", "mxfp4")
    assert cli.main(["checkpoint", "make", "--producer", "gpt-oss", "--scheme", "mxfp4"]) == 0
    assert capsys.readouterr().out.strip() == str(folder)
    assert cli.main(["checkpoint", "check", str(folder), "--expect", "gpt-oss"]) == 0
    assert "0 differ" in capsys.readouterr().out
    assert cli.main(["checkpoint", "check", str(folder), "--expect", "quark"]) == 1
    assert f"--expect quark: {folder} holds a gpt-oss checkpoint" in capsys.readouterr().err
