"""MoE implementations by name: the `moe_harness.moe_implementations`
entry-point group, `module:object` paths, the shipped ones, and names
registered in-process. A name resolves to a MoEImplementation or a
zero-argument factory returning one; a factory raises Unavailable(reason)
when its package or device is missing, and the run reports it as skipped."""
from __future__ import annotations

import difflib
import importlib
from importlib import metadata

from harness.conformance.moe.protocol import MoEImplementation, Unavailable

GROUP = "moe_harness.moe_implementations"

# name -> "module:factory": the same list as the pyproject entry points, so the
# shipped implementations resolve where the package's metadata is stale.
SHIPPED = {
    "harness-unfused": "harness.conformance.moe.layers:harness_unfused",
    "harness-fused": "harness.conformance.moe.layers:harness_fused",
    "triton-kernels-w4a16": "harness.conformance.moe.triton_kernels_moe:triton_kernels_w4a16",
    "planted-double-qdq": "harness.conformance.moe.planted:double_qdq",
    "planted-a1-scale": "harness.conformance.moe.planted:a1_scale",
    "planted-weight-device": "harness.conformance.moe.planted:weight_device",
    "planted-host-sync": "harness.conformance.moe.planted:host_sync",
    "planted-dtype-skip": "harness.conformance.moe.planted:dtype_skip",
    "planted-global-scale-reciprocal": "harness.conformance.moe.planted:global_scale_reciprocal",
    "planted-shared-weights": "harness.conformance.moe.planted:shared_weights",
    "planted-ties-away": "harness.conformance.moe.planted:ties_away",
}
# Shipped implementations that exist to be failed (each by one check).
PLANTED = tuple(n for n in SHIPPED if n.startswith("planted-"))
_REGISTERED: dict = {}


def register_moe_implementation(name: str, factory=None):
    """Register `factory` (a MoEImplementation or a callable returning one)
    under `name`; usable as a decorator."""
    def deco(obj):
        if name in _REGISTERED and _REGISTERED[name] is not obj:
            raise ValueError(f"MoE implementation name {name!r} is already registered")
        _REGISTERED[name] = obj
        return obj
    return deco(factory) if factory is not None else deco


def _entry_points() -> dict:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def available_names() -> list:
    return sorted(set(_entry_points()) | set(_REGISTERED) | set(SHIPPED))


def default_names() -> list:
    """What `--moe all` runs: every available implementation but the planted ones."""
    return [n for n in available_names() if n not in PLANTED]


def _materialize(obj, label: str) -> MoEImplementation:
    impl = obj() if callable(obj) and not isinstance(obj, MoEImplementation) else obj
    if not isinstance(impl, MoEImplementation):
        raise TypeError(f"{label} gave {type(impl).__name__}, not a harness.conformance.moe.MoEImplementation")
    return impl


def _load_path(spec: str):
    module, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"--moe {spec!r}: cannot import module {module!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--moe {spec!r}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def get_moe_implementation(name) -> MoEImplementation:
    """MoEImplementation for an object, a registered name or `module:object`.
    ValueError (with did-you-mean) for an unknown name; Unavailable when its
    package or device is missing."""
    if isinstance(name, MoEImplementation):
        return name
    if ":" in name:
        return _materialize(_load_path(name), f"--moe {name!r}")
    if name in _REGISTERED:
        return _materialize(_REGISTERED[name], f"MoE implementation {name!r}")
    eps = _entry_points()
    if name in eps:
        try:
            obj = eps[name].load()
        except ImportError as e:
            raise Unavailable(f"entry point {eps[name].value!r} does not import: {e}") from None
        return _materialize(obj, f"entry point {name!r}")
    if name in SHIPPED:
        return _materialize(_load_path(SHIPPED[name]), f"MoE implementation {name!r}")
    known = available_names()
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"unknown MoE implementation {name!r}{hint} (known: {', '.join(known)}; or give module:object)")
