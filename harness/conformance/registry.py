"""Implementations by name: the `moe_harness.implementations` entry-point group,
`module:object` paths, and names registered in-process (tests, notebooks).

An entry point (or `module:object`) names either an Implementation or a
zero-argument factory returning one; a factory raises Unavailable(reason) when
its package or device is missing, so the run reports it as skipped.
"""
from __future__ import annotations

import difflib
import importlib
from importlib import metadata

from harness.conformance.protocol import Implementation, Unavailable
from harness.conformance.adapters import SHIPPED

GROUP = "moe_harness.implementations"
_REGISTERED: dict = {}


def register_implementation(name: str, factory=None):
    """Register `factory` (an Implementation or a callable returning one) under
    `name`; usable as a decorator."""
    def deco(obj):
        if name in _REGISTERED and _REGISTERED[name] is not obj:
            raise ValueError(f"implementation name {name!r} is already registered")
        _REGISTERED[name] = obj
        return obj
    return deco(factory) if factory is not None else deco


def _entry_points() -> dict:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def _shipped() -> dict:
    return SHIPPED


def available_names() -> list[str]:
    return sorted(set(_entry_points()) | set(_REGISTERED) | set(_shipped()))


def _materialize(obj, label: str) -> Implementation:
    impl = obj() if callable(obj) and not isinstance(obj, Implementation) else obj
    if not isinstance(impl, Implementation):
        raise TypeError(f"{label} gave {type(impl).__name__}, not a harness.conformance.Implementation")
    return impl


def _load_path(spec: str):
    module, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"--impl {spec!r}: cannot import module {module!r} ({e})") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--impl {spec!r}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _found_by(impl: Implementation, name: str) -> Implementation:
    """Note the name any interpreter can find `impl` by (a shipped name, an
    entry point, a module:object path): a CUDA run's fresh child process
    rebuilds an implementation that does not pickle from it (isolation.py)."""
    impl.found_by = name
    return impl


def get_implementation(name: str) -> Implementation:
    """Implementation for a registered name or a `module:object` path.

    Raises ValueError with did-you-mean suggestions for an unknown name, and
    Unavailable (with the reason) when its package or device is missing."""
    if ":" in name:
        return _found_by(_materialize(_load_path(name), f"--impl {name!r}"), name)
    if name in _REGISTERED:  # registered in this process only: a fresh interpreter cannot find it by name
        return _materialize(_REGISTERED[name], f"implementation {name!r}")
    eps = _entry_points()
    if name in eps:
        try:
            obj = eps[name].load()
        except ImportError as e:
            raise Unavailable(f"entry point {eps[name].value!r} does not import: {e}") from None
        return _found_by(_materialize(obj, f"entry point {name!r}"), name)
    if name in _shipped():
        try:
            obj = _load_path(_shipped()[name])
        except ValueError as e:
            raise Unavailable(str(e)) from None
        return _found_by(_materialize(obj, f"implementation {name!r}"), name)
    known = available_names()
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown implementation {name!r}{hint} (known: {', '.join(known) or 'none'}; "
                     "or give module:object)")
