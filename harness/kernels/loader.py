"""Load the Triton kernel source either compiled (GPU) or interpreted (CPU).

Triton decides at decoration time (`@triton.jit`) whether a function is a
compiled JITFunction or an InterpretedFunction, from TRITON_INTERPRET. Rather
than asking every caller to set that variable before anything imports
triton, the kernel source file is executed twice, as two private modules:
once with TRITON_INTERPRET=0 (compiled, for GPU tensors) and once with
TRITON_INTERPRET=1 (the interpreter, for CPU tensors). Both copies can live in
one process, so CPU interpreter tests and GPU runs need no environment set-up,
and a TRITON_INTERPRET=1 left in the environment cannot break the GPU path.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("triton_src.py")
_MODULE_NAMES = {False: "harness.kernels._triton_compiled", True: "harness.kernels._triton_interpreted"}
_LOCK = threading.Lock()
_LOADED: dict[bool, ModuleType] = {}


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def kernels(interpret: bool) -> ModuleType:
    """The kernel module; `interpret=True` gives the Triton-interpreter copy."""
    interpret = bool(interpret)
    mod = _LOADED.get(interpret)
    if mod is not None:
        return mod
    with _LOCK:
        if interpret not in _LOADED:
            _LOADED[interpret] = _load(interpret)
    return _LOADED[interpret]


def _load(interpret: bool) -> ModuleType:
    if not triton_available():
        raise RuntimeError("backend='triton' needs the triton package (pip install triton)")
    name = _MODULE_NAMES[interpret]
    # Import triton itself (and its lazily imported parts) under the caller's
    # setting first: its own library functions must stay what the process
    # started with, only this file's functions change kind.
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    try:
        import triton.experimental.gluon  # noqa: F401  (imported lazily by triton's launcher)
    except Exception:  # pragma: no cover - absent in older triton
        pass
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        spec = importlib.util.spec_from_file_location(name, SOURCE)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old
    from triton.runtime.interpreter import InterpretedFunction

    got = isinstance(mod.qdq_kernel, InterpretedFunction)
    if got != interpret:  # a triton that reads the variable only once, at import
        want = "interpreted" if interpret else "compiled"
        raise RuntimeError(
            f"this triton ignored TRITON_INTERPRET at decoration time, so no {want} kernels can be made; "
            "set TRITON_INTERPRET=1 before importing triton to run them on CPU, unset it for the GPU"
        )
    if interpret:
        _fast_helpers(mod, InterpretedFunction)
    return mod


class _InterpretedHelper:
    """A device helper called from an interpreted kernel. The kernel's launch
    already patched triton.language for this module's globals, so the helper
    runs its rewritten function directly instead of re-patching the language
    on every call (about a quarter of the interpreter's time otherwise)."""

    def __init__(self, fn):
        self._fn = fn
        self.__name__ = fn.__name__

    def __call__(self, *args, **kwargs):
        return self._fn.rewrite()(*args, **kwargs)


def _fast_helpers(mod: ModuleType, interpreted_type) -> None:
    for name, value in list(vars(mod).items()):
        if name.startswith("_") and isinstance(value, interpreted_type) and not name.endswith("_kernel"):
            setattr(mod, name, _InterpretedHelper(value))
