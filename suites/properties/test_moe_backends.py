"""The MoE op backends (harness/moe/ops.py): "torch" and "auto" on a CPU never
need Triton (a supported configuration: CPU without the triton package);
"triton", or "auto" on a GPU, fails loudly when harness.kernels or triton is
missing instead of quietly taking the reference path."""
import sys

import pytest
import torch

import harness.formats as hf
from harness.kernels import loader
from harness.moe import ops
from harness.testing.checks.bitwise import assert_bitwise_equal


@pytest.fixture
def no_kernels(monkeypatch):
    """harness.kernels cannot be imported (a broken or partial install)."""
    ops.kernels_module.cache_clear()
    monkeypatch.setitem(sys.modules, "harness.kernels", None)
    yield
    ops.kernels_module.cache_clear()


@pytest.fixture
def no_triton(monkeypatch):
    """The triton package is not installed (no compiled or interpreted kernels loaded yet)."""
    monkeypatch.setattr(loader, "triton_available", lambda: False)
    monkeypatch.setattr(loader, "_LOADED", {})


def _x():
    return torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 3


def test_auto_is_triton_on_gpu_devices_and_torch_elsewhere():
    assert ops.resolve_backend("auto", torch.device("cpu")) == "torch"
    assert ops.resolve_backend("auto", torch.device("cuda")) == "triton"
    assert ops.resolve_backend("torch", torch.device("cuda")) == "torch"
    with pytest.raises(ValueError, match="unknown op backend 'cuda'"):
        ops.resolve_backend("cuda", torch.device("cpu"))


@pytest.mark.parametrize("backend", ("auto", "torch"))
def test_cpu_runs_without_kernels_or_triton(no_kernels, no_triton, backend):
    x = _x()
    assert_bitwise_equal(ops.qdq(x, "mxfp4", scale_mode="even", backend=backend), hf.qdq(x, "mxfp4", scale_mode="even"),
                         f"ops.qdq backend={backend} without harness.kernels")


def test_broken_kernels_import_is_an_error_not_the_reference_path(no_kernels):
    with pytest.raises(ImportError, match="harness.kernels"):
        ops.qdq(_x(), "mxfp4", backend="triton")
    with pytest.raises(ImportError, match="harness.kernels"):
        ops._use_kernels("auto", torch.device("cuda"))


def test_triton_backend_without_triton_names_the_package(no_triton):
    with pytest.raises(RuntimeError, match=r"needs the triton package \(pip install triton\)"):
        ops.qdq(_x(), "mxfp4", backend="triton")
