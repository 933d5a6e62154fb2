"""`moe-harness conform` refuses bad input with one line and exit 2 before
running anything: a registry that is not YAML, not UTF-8, or has fields of
the wrong type; a --reports that cannot hold reports; bad time limits. The
pytest plugin's check runs isolated by default and in-process when asked."""
import os

import pytest

import harness.formats as hf
from harness import cli
from harness.conformance.check import check

REGISTRIES = {
    "not YAML": b"- id: [\n",
    "not UTF-8": b"- id: \xff\xfe\n",
    "not a list": b"id: x\n",
    "a field of the wrong type": (b'- {id: x, implementation: y, versions: "*", scale_kind: e8m0, stages: 5, '
                                  b"match: [1], explanation: z, found: w}\n"),
    "control characters": b"a: [\n\x01",
}


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_a_garbage_registry_is_one_line_and_exit_2(tmp_path, capsys, kind):
    (tmp_path / "r.yaml").write_bytes(REGISTRIES[kind])
    rc = cli.main(["conform", "--registry", str(tmp_path / "r.yaml"), "--reports", str(tmp_path / "rep")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "r.yaml" in err, err
    assert not (tmp_path / "rep").exists() or not any((tmp_path / "rep").iterdir())


@pytest.mark.parametrize("args,needle", [
    (["--reports", "{file}/reports"], "--reports"),
    (["--cell-timeout", "0"], "cell_timeout_s"),
    (["--impl-timeout", "-1"], "impl_timeout_s"),
])
def test_bad_run_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, needle):
    (tmp_path / "file").write_text("x")
    args = [a.format(file=tmp_path / "file") for a in args]
    rc = cli.main(["conform", "--formats", "mxfp4", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and needle in err, err


def _pid_of_call(x):
    _pid_of_call.pids.add(os.getpid())
    return hf.qdq(x, "mxfp4", "floor", "rne")


def test_plugin_check_isolated_by_default_and_in_process_when_asked():
    _pid_of_call.pids = set()
    check(_pid_of_call, "mxfp4", "floor", dtypes=("float32",), random_blocks=4, isolate=False)
    assert _pid_of_call.pids == {os.getpid()}
    _pid_of_call.pids = set()
    check(_pid_of_call, "mxfp4", "floor", dtypes=("float32",), random_blocks=4)
    assert _pid_of_call.pids == set(), "the default check ran the function in this process"


def test_plugin_check_reports_an_exiting_function_as_a_failure():
    def exits(x):
        os._exit(9)
    with pytest.raises(AssertionError, match="exited with status 9"):
        check(exits, "mxfp4", "floor", dtypes=("float32",), random_blocks=4)
