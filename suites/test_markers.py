"""The suite's own markers (conftest.py): `cpu_only` skips a CPU dry run
where a GPU is visible (its devices would follow the machine) and runs it
where none is."""
import pytest

import conftest


class _Item:
    def __init__(self, **markers):
        self.markers = {k: pytest.Mark(k, v, {}) for k, v in markers.items()}

    def get_closest_marker(self, name):
        return self.markers.get(name)


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_cpu_only_skips_where_a_gpu_is_visible(monkeypatch, kind):
    monkeypatch.setattr(conftest, "_gpu_kind", lambda: (kind, "x"))
    with pytest.raises(pytest.skip.Exception, match="CPU dry run, a GPU is visible: why"):
        conftest.pytest_runtest_setup(_Item(cpu_only=("why",)))
    conftest.pytest_runtest_setup(_Item())  # unmarked: runs


def test_cpu_only_runs_without_a_gpu(monkeypatch):
    monkeypatch.setattr(conftest, "_gpu_kind", lambda: (None, None))
    conftest.pytest_runtest_setup(_Item(cpu_only=("why",)))  # no skip
    with pytest.raises(pytest.skip.Exception, match="needs a GPU"):
        conftest.pytest_runtest_setup(_Item(gpu=()))
