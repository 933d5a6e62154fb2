"""The text-pattern fault table (suites/fault_injection.py) stays live: every
pattern occurs exactly once in its file and every named test exists (a stale
row fails here, in `make test`), and a few cheap faults, applied to a scratch
copy, turn their named test red. The full sweep is the nightly step
`cpu-fault-injection` (harness/pipelines/nightly.py)."""
import sys

import pytest

from suites import fault_injection as fi

BY_NAME = {f[0]: f for f in fi.FAULTS}
# Cheap to run (one test each, ~10 s with the interpreter start) and in two layers.
FAST = ("rne ties rounded away", "fused MoE GEMM: unmasked loads on tiles that do not divide N, K")


def test_every_pattern_matches_once_and_every_named_test_exists():
    assert len(BY_NAME) == len(fi.FAULTS), "fault names must be unique"
    assert fi.table_problems() == []


def test_the_table_check_reports_stale_rows():
    name, path, old, new, tests = fi.FAULTS[0]
    stale = [("gone", path, old + "<not in the file>", new, tests),
             ("twice", "harness/formats/spec.py", "import", "", tests),
             ("no such test", path, old, new, [tests[0].split("::")[0] + "::test_does_not_exist"])]
    got = fi.table_problems(stale)
    assert got == [f"gone: pattern found 0 times in {path} (must be exactly once)",
                   f"twice: pattern found {open(fi.ROOT / 'harness/formats/spec.py').read().count('import')} times "
                   f"in harness/formats/spec.py (must be exactly once)",
                   f"no such test: test {tests[0].split('::')[0]}::test_does_not_exist does not exist"]


@pytest.mark.parametrize("name", FAST)
def test_fault_turns_its_test_red(name):
    fault, path, old, new, tests = BY_NAME[name]
    row = fi.run_fault(fault, path, old, new, tests[:1], python=sys.executable)
    assert row.get("caught"), row
