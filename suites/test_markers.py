"""The suite's own markers, implemented in the root conftest.py's
pytest_runtest_setup: `cpu_only` skips a CPU dry run where a GPU is visible
(its devices would follow the machine) and runs it where none is; `rocm(arch)`
runs only on a ROCm GPU (of that gfx arch); `nightly` runs only under the
nightly hypothesis profile. The conftest module is the one pytest loaded,
taken from its plugin manager (test modules import no conftest)."""
import pytest
from hypothesis import settings


@pytest.fixture
def root_conftest(request):
    """The root conftest.py as pytest registered it (by its path)."""
    mod = request.config.pluginmanager.get_plugin(str(request.config.rootpath / "conftest.py"))
    assert mod is not None, "the root conftest.py is not loaded"
    return mod


class _Item:
    def __init__(self, **markers):
        self.markers = {k: v if isinstance(v, pytest.Mark) else pytest.Mark(k, v, {}) for k, v in markers.items()}

    def get_closest_marker(self, name):
        return self.markers.get(name)


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_cpu_only_skips_where_a_gpu_is_visible(monkeypatch, root_conftest, kind):
    monkeypatch.setattr(root_conftest, "_gpu_kind", lambda: (kind, "x"))
    with pytest.raises(pytest.skip.Exception, match="CPU dry run, a GPU is visible: why"):
        root_conftest.pytest_runtest_setup(_Item(cpu_only=("why",)))
    root_conftest.pytest_runtest_setup(_Item())  # unmarked: runs


def test_cpu_only_runs_without_a_gpu(monkeypatch, root_conftest):
    monkeypatch.setattr(root_conftest, "_gpu_kind", lambda: (None, None))
    root_conftest.pytest_runtest_setup(_Item(cpu_only=("why",)))  # no skip
    with pytest.raises(pytest.skip.Exception, match="needs a GPU"):
        root_conftest.pytest_runtest_setup(_Item(gpu=()))


@pytest.mark.parametrize("mark", [pytest.Mark("rocm", ("gfx942",), {}), pytest.Mark("rocm", (), {"arch": "gfx942"})],
                         ids=["positional", "keyword"])
def test_rocm_arch_runs_only_on_that_arch(monkeypatch, root_conftest, mark):
    monkeypatch.setattr(root_conftest, "_gpu_kind", lambda: ("rocm", "gfx942"))
    root_conftest.pytest_runtest_setup(_Item(rocm=mark))  # runs
    for other in (("rocm", "gfx950"), ("cuda", "NVIDIA H200"), (None, None)):
        monkeypatch.setattr(root_conftest, "_gpu_kind", lambda other=other: other)
        with pytest.raises(pytest.skip.Exception, match="needs a ROCm GPU gfx942"):
            root_conftest.pytest_runtest_setup(_Item(rocm=mark))


def test_rocm_without_arch_runs_on_any_rocm_gpu(monkeypatch, root_conftest):
    monkeypatch.setattr(root_conftest, "_gpu_kind", lambda: ("rocm", "gfx950"))
    root_conftest.pytest_runtest_setup(_Item(rocm=()))
    monkeypatch.setattr(root_conftest, "_gpu_kind", lambda: ("cuda", "NVIDIA H200"))
    with pytest.raises(pytest.skip.Exception, match="needs a ROCm GPU$"):
        root_conftest.pytest_runtest_setup(_Item(rocm=()))


def test_nightly_runs_only_under_the_nightly_profile(monkeypatch, root_conftest):
    monkeypatch.setattr(root_conftest, "_gpu_kind", lambda: (None, None))
    monkeypatch.setattr(settings, "_current_profile", "dev")
    with pytest.raises(pytest.skip.Exception, match="nightly only"):
        root_conftest.pytest_runtest_setup(_Item(nightly=()))
    monkeypatch.setattr(settings, "_current_profile", "nightly")
    root_conftest.pytest_runtest_setup(_Item(nightly=()))
