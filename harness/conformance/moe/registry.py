"""MoE implementations by name: the `moe_harness.moe_implementations`
entry-point group, `module:object` paths, the shipped ones, and names
registered in-process. A name resolves to a MoEImplementation or a
zero-argument factory returning one; a factory raises Unavailable(reason)
when its package or device is missing, and the run reports it as skipped."""
from __future__ import annotations

from importlib import metadata

from harness.conformance import named
from harness.conformance.moe.protocol import MoEImplementation

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
KIND = named.Kind("MoE implementation", "--moe", MoEImplementation, "harness.conformance.moe.MoEImplementation")


def register_moe_implementation(name: str, factory=None):
    """Register `factory` (a MoEImplementation or a callable returning one)
    under `name`; usable as a decorator."""
    return named.register(_REGISTERED, KIND, name, factory)


def _entry_points() -> dict:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def available_names() -> list:
    return sorted(set(_entry_points()) | set(_REGISTERED) | set(SHIPPED))


def default_names() -> list:
    """What `--moe all` runs: every available implementation but the planted ones."""
    return [n for n in available_names() if n not in PLANTED]


def get_moe_implementation(name) -> MoEImplementation:
    """MoEImplementation for an object, a registered name or `module:object`.
    ValueError (with did-you-mean) for an unknown name; Unavailable when its
    package or device is missing."""
    if isinstance(name, MoEImplementation):
        return name
    return named.resolve(name, KIND, _REGISTERED, _entry_points(), SHIPPED)
