"""Implementations by name, the one lookup both registries use (quantizers:
registry.py, MoE layers: moe/registry.py; each keeps its own names):

    a `module:object` path, a name registered in this process, an entry point
    of the registry's group, a shipped name

An entry resolves to an implementation or a zero-argument factory returning
one (a factory raises Unavailable(reason) when its package or device is
missing). An unknown name is a ValueError with did-you-mean; an entry point
or shipped path that does not import is Unavailable. An implementation found
by a name another interpreter can resolve (all but the in-process ones)
carries it as `found_by`: a CUDA conformance run rebuilds one that does not
pickle from it in its spawned child (isolation.py)."""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass

from harness.conformance.protocol import Unavailable


@dataclass(frozen=True)
class Kind:
    what: str        # "implementation" | "MoE implementation"
    flag: str        # the command-line flag that names one ("--impl" | "--moe")
    impl_type: type  # what an entry must give
    api: str         # the class, as a user imports it (for the error message)


def register(registered: dict, kind: Kind, name: str, factory=None):
    """Register `factory` (an implementation or a callable returning one)
    under `name`; usable as a decorator."""
    def deco(obj):
        if name in registered and registered[name] is not obj:
            raise ValueError(f"{kind.what} name {name!r} is already registered")
        registered[name] = obj
        return obj
    return deco(factory) if factory is not None else deco


def materialize(obj, label: str, kind: Kind):
    impl = obj() if callable(obj) and not isinstance(obj, kind.impl_type) else obj
    if not isinstance(impl, kind.impl_type):
        raise TypeError(f"{label} gave {type(impl).__name__}, not a {kind.api}")
    return impl


def load_path(spec: str, kind: Kind):
    module, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"{kind.flag} {spec!r}: cannot import module {module!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{kind.flag} {spec!r}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _found_by(impl, name: str):
    impl.found_by = name
    return impl


def resolve(name: str, kind: Kind, registered: dict, entry_points: dict, shipped: dict):
    """The implementation `name` stands for (module docstring)."""
    if ":" in name:
        return _found_by(materialize(load_path(name, kind), f"{kind.flag} {name!r}", kind), name)
    if name in registered:  # this process only: a fresh interpreter cannot find it by name
        return materialize(registered[name], f"{kind.what} {name!r}", kind)
    if name in entry_points:
        try:
            obj = entry_points[name].load()
        except ImportError as e:
            raise Unavailable(f"entry point {entry_points[name].value!r} does not import: {e}") from None
        return _found_by(materialize(obj, f"entry point {name!r}", kind), name)
    if name in shipped:
        try:
            obj = load_path(shipped[name], kind)
        except ValueError as e:
            raise Unavailable(str(e)) from None
        return _found_by(materialize(obj, f"{kind.what} {name!r}", kind), name)
    known = sorted(set(entry_points) | set(registered) | set(shipped))
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown {kind.what} {name!r}{hint} (known: {', '.join(known) or 'none'}; "
                     "or give module:object)")
