"""Implementations by name: the `moe_harness.implementations` entry-point group,
`module:object` paths, and names registered in-process (tests, notebooks).

An entry point (or `module:object`) names either an Implementation or a
zero-argument factory returning one; a factory raises Unavailable(reason) when
its package or device is missing, so the run reports it as skipped.
"""
from __future__ import annotations

from importlib import metadata

from harness.conformance import named
from harness.conformance.protocol import Implementation
from harness.conformance.adapters import SHIPPED

GROUP = "moe_harness.implementations"
KIND = named.Kind("implementation", "--impl", Implementation, "harness.conformance.Implementation")
_REGISTERED: dict = {}


def register_implementation(name: str, factory=None):
    """Register `factory` (an Implementation or a callable returning one) under
    `name`; usable as a decorator."""
    return named.register(_REGISTERED, KIND, name, factory)


def _entry_points() -> dict:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def _shipped() -> dict:
    return SHIPPED


def available_names() -> list[str]:
    return sorted(set(_entry_points()) | set(_REGISTERED) | set(_shipped()))


def get_implementation(name: str) -> Implementation:
    """Implementation for a registered name or a `module:object` path.

    Raises ValueError with did-you-mean suggestions for an unknown name, and
    Unavailable (with the reason) when its package or device is missing."""
    return named.resolve(name, KIND, _REGISTERED, _entry_points(), _shipped())
