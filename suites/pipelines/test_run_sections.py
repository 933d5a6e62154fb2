"""`moe-harness run`: a section that cannot import what it needs is a failed
check naming the package and the extra to install, never a quiet skip."""
from harness.commands import run


def _run(section, runner):
    rows = []
    run._run_section(section, runner, {}, rows.append, {}, lambda text: None)
    return rows


def test_missing_package_is_a_failed_check_with_the_install_hint():
    def needs_lm_eval(ctx, emit):
        raise ModuleNotFoundError("No module named 'lm_eval'", name="lm_eval")

    (row,) = _run("lmeval", needs_lm_eval)
    assert row["passed"] is False
    assert row["name"] == "lmeval: crashed"
    assert "No module named 'lm_eval'" in row["message"]
    assert "pip install -e '.[lmeval]'" in row["message"]


def test_a_crash_keeps_the_checks_before_it():
    def one_then_crash(ctx, emit):
        emit({"name": "ok", "passed": True})
        raise RuntimeError("boom")

    rows = _run("moe", one_then_crash)
    assert [r["name"] for r in rows] == ["ok", "moe: crashed"]
    assert rows[1]["passed"] is False and rows[1]["message"] == "RuntimeError: boom"
