"""Device names given on the command line or in a config: checked by name
without torch (fast validation), and against this machine before a run."""

from __future__ import annotations

import re

_DEVICE = re.compile(r"^(cpu|cuda(?::(\d+))?)$")
KNOWN = "cpu, cuda or cuda:N (ROCm GPUs are cuda too)"


class DeviceError(ValueError):
    pass


def check_name(name) -> str:
    if not isinstance(name, str) or not _DEVICE.match(name):
        raise DeviceError(f"unknown device {name!r}; expected {KNOWN}")
    return name


def check_available(name: str) -> str:
    """`name` if this machine has it; DeviceError saying what it has otherwise."""
    check_name(name)
    if name == "cpu":
        return name
    import torch

    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None and torch.version.hip is None else "no visible GPU"
        raise DeviceError(f"device {name!r} requested but this machine has {build}; use --device cpu")
    index = int(_DEVICE.match(name).group(2) or 0)
    if index >= torch.cuda.device_count():
        raise DeviceError(f"device {name!r} requested but only {torch.cuda.device_count()} GPU(s) are visible")
    return name
