"""The one loader of the Triton kernel sources: compiled (GPU) or interpreted (CPU).

Triton decides at decoration time (`@triton.jit`) whether a function is a
compiled JITFunction or an InterpretedFunction, from TRITON_INTERPRET. Rather
than asking every caller to set that variable before anything imports
triton, every kernel source file (SOURCES) is executed twice, as modules of
two private packages: `harness.kernels._compiled` with TRITON_INTERPRET=0
(for GPU tensors) and `harness.kernels._interpreted` with TRITON_INTERPRET=1
(the interpreter, for CPU tensors). Both copies live in one process, so CPU
interpreter tests and GPU runs need no environment set-up, and a
TRITON_INTERPRET=1 left in the environment cannot break the GPU path.

A kernel source imports another one's jit functions relatively
(`from .triton_src import _decode`): inside a private package that import
resolves to the copy of the same kind, so a compiled kernel calls compiled
helpers and an interpreted one interpreted helpers. Everything else is
imported absolutely (harness.formats, harness.kernels.constants).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

SOURCE_DIR = Path(__file__).resolve().parent
# Kernel source files (module names in SOURCE_DIR), loaded in this order.
SOURCES = ("triton_src", "fused_act_src", "fused_gemm_src", "moe_align_src", "topk_src")
PACKAGES = {False: "harness.kernels._compiled", True: "harness.kernels._interpreted"}
_LOCK = threading.RLock()
_LOADED: dict[bool, dict[str, ModuleType]] = {}


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def kernels(interpret: bool, source: str = "triton_src") -> ModuleType:
    """The kernel source module `source` (one of SOURCES); `interpret=True`
    gives its Triton-interpreter copy."""
    if source not in SOURCES:
        raise ValueError(f"unknown kernel source {source!r}; expected one of {', '.join(SOURCES)}")
    interpret = bool(interpret)
    mods = _LOADED.get(interpret)
    if mods is None:
        with _LOCK:
            if interpret not in _LOADED:
                _check_triton()
                _LOADED[interpret] = {name: _exec(f"{PACKAGES[interpret]}.{name}", SOURCE_DIR / f"{name}.py",
                                                  interpret) for name in SOURCES}
            mods = _LOADED[interpret]
    return mods[source]


def load_file(path, interpret: bool, name: str) -> ModuleType:
    """Execute one more kernel source file as `name` in the package of the
    given kind (its relative imports see that package's SOURCES): a modified
    copy of a source, for fault injection in tests."""
    kernels(interpret)  # the package and its sources first
    with _LOCK:
        return _exec(f"{PACKAGES[bool(interpret)]}.{name}", Path(path), bool(interpret))


def _check_triton():
    if not triton_available():
        raise RuntimeError("backend='triton' needs the triton package (pip install triton)")
    # Import triton itself (and its lazily imported parts) under the caller's
    # setting first: its own library functions must stay what the process
    # started with, only the kernel sources' functions change kind.
    import triton
    import triton.language

    try:
        import triton.experimental.gluon  # noqa: F401  (imported lazily by triton's launcher)
    except Exception:  # pragma: no cover - absent in older triton
        pass


def _package(interpret: bool) -> ModuleType:
    name = PACKAGES[interpret]
    pkg = sys.modules.get(name)
    if pkg is None:
        pkg = ModuleType(name, "Triton kernel sources, " + ("interpreted" if interpret else "compiled"))
        pkg.__path__ = [str(SOURCE_DIR)]
        pkg.__package__ = name
        sys.modules[name] = pkg
    return pkg


@contextlib.contextmanager
def _interpret_env(interpret: bool):
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def _exec(qualname: str, path: Path, interpret: bool) -> ModuleType:
    pkg = _package(interpret)
    spec = importlib.util.spec_from_file_location(qualname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[qualname] = mod
    try:
        with _interpret_env(interpret):
            spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(qualname, None)
        raise
    setattr(pkg, qualname.rsplit(".", 1)[1], mod)
    _check_kind(mod, interpret)
    if interpret:
        _fast_helpers(mod)
    return mod


def _check_kind(mod: ModuleType, interpret: bool) -> None:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    jitted = [v for v in vars(mod).values() if isinstance(v, (JITFunction, InterpretedFunction))]
    if any(isinstance(v, InterpretedFunction) != interpret for v in jitted):
        want = "interpreted" if interpret else "compiled"
        raise RuntimeError(
            f"this triton ignored TRITON_INTERPRET at decoration time, so no {want} kernels can be made; "
            "set TRITON_INTERPRET=1 before importing triton to run them on CPU, unset it for the GPU"
        )


class _InterpretedHelper:
    """A device helper called from an interpreted kernel. The kernel's launch
    already patched triton.language (module-wide), so the helper runs its
    rewritten function directly instead of re-patching the language on every
    call (about a quarter of the interpreter's time otherwise)."""

    def __init__(self, fn):
        self._fn = fn
        self.__name__ = fn.__name__

    def __call__(self, *args, **kwargs):
        return self._fn.rewrite()(*args, **kwargs)


def _fast_helpers(mod: ModuleType) -> None:
    """Device helpers (underscore names not ending in _kernel) of an
    interpreted source, its own and those it imported, become _InterpretedHelper."""
    from triton.runtime.interpreter import InterpretedFunction

    for name, value in list(vars(mod).items()):
        if name.startswith("_") and isinstance(value, InterpretedFunction) and not name.endswith("_kernel"):
            setattr(mod, name, _InterpretedHelper(value))
