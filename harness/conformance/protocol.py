"""The implementation protocol: what a quantizer under test declares and provides.

An implementation declares what it supports (formats, MX scale modes, element
roundings, input and output dtypes, devices) and its conventions, and provides
any of three stages; a stage it does not provide is reported as "not provided",
never guessed:

    quantize(x, fmt, scale_mode, rounding, global_scale) -> (codes, scales)
        codes  uint8, same shape as x, one element code per byte in the
               element's own bit layout (the adapter unpacks fp4 if needed)
        scales uint8 [..., K // block]: E8M0 bytes (MX) or float8_e4m3fn bits
    dequantize(codes, scales, fmt, global_scale, dtype) -> tensor of `dtype`
    qdq(x, fmt, scale_mode, rounding, global_scale) -> tensor like x

global_scale is always handed over in the implementation's declared
convention (`conventions["global_scale"]`): "encode" gets the harness's
encode-side 448*6/amax, "decode" its reciprocal, "none" means the
implementation has single-level scaling only and is run with the global
scale 1.0. Power-of-two global scales are used so both conventions are exact.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import harness.formats as hf

STAGES = ("scales", "codes", "dequantize", "qdq")
GLOBAL_SCALE_CONVENTIONS = ("encode", "decode", "none")
DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Unavailable(Exception):
    """Raised by an implementation factory whose package or device is missing;
    the message is the reason the report gives for skipping it."""


@dataclass
class Implementation:
    """One quantizer under test. Build it with any subset of the three stages."""

    name: str
    version: str = "unversioned"
    formats: tuple = hf.FORMAT_NAMES
    scale_modes: tuple = hf.SCALE_MODES
    roundings: tuple = ("rne",)
    input_dtypes: tuple = (torch.float32, torch.bfloat16, torch.float16)
    output_dtypes: tuple = (torch.float32, torch.bfloat16, torch.float16)
    devices: tuple = ("cpu", "cuda")
    conventions: dict = field(default_factory=lambda: {"global_scale": "encode", "scale_dtype": "uint8",
                                                       "packing": "unpacked"})
    quantize: Optional[Callable] = None
    dequantize: Optional[Callable] = None
    qdq: Optional[Callable] = None
    # Largest input (elements) one call should get: interpreters are slow.
    max_elements: int = 1 << 20
    # NVFP4 encode-side global scales to run (None: the runner's powers of
    # two). An implementation that stores the decode-side 1/gs adds a value
    # whose reciprocal is inexact in float32, to expose what that rounding does.
    global_scales: Optional[tuple] = None

    def __post_init__(self):
        unknown = [f for f in self.formats if f not in hf.FORMATS]
        if unknown:
            raise ValueError(f"implementation {self.name!r}: unknown formats {unknown}; expected {hf.FORMAT_NAMES}")
        bad = [m for m in self.scale_modes if m not in hf.SCALE_MODES]
        if bad:
            raise ValueError(f"implementation {self.name!r}: unknown scale modes {bad}; expected {hf.SCALE_MODES}")
        bad = [r for r in self.roundings if r not in hf.ROUNDINGS]
        if bad:
            raise ValueError(f"implementation {self.name!r}: unknown roundings {bad}; expected {hf.ROUNDINGS}")
        gsc = self.conventions.get("global_scale", "encode")
        if gsc not in GLOBAL_SCALE_CONVENTIONS:
            raise ValueError(f"implementation {self.name!r}: conventions.global_scale {gsc!r} is not one of "
                             f"{GLOBAL_SCALE_CONVENTIONS}")
        self.input_dtypes = tuple(_dtype(d, self.name) for d in self.input_dtypes)
        self.output_dtypes = tuple(_dtype(d, self.name) for d in self.output_dtypes)
        if self.global_scales is not None:
            bad = [g for g in self.global_scales if not (isinstance(g, (int, float)) and 0 < g < float("inf"))]
            if bad or not self.global_scales:
                raise ValueError(f"implementation {self.name!r}: global_scales {self.global_scales!r} must be "
                                 "finite positive numbers")
            self.global_scales = tuple(float(g) for g in self.global_scales)
        if not (self.quantize or self.dequantize or self.qdq):
            raise ValueError(f"implementation {self.name!r} provides none of quantize, dequantize, qdq")

    def provides(self, stage: str) -> bool:
        if stage in ("scales", "codes"):
            return self.quantize is not None
        return getattr(self, stage) is not None

    def global_scale_for(self, gs: float) -> Optional[float]:
        """The harness's encode-side scale in this implementation's convention."""
        conv = self.conventions.get("global_scale", "encode")
        if conv == "encode":
            return gs
        if conv == "decode":
            return 1.0 / gs
        return None

    def describe(self) -> dict:
        return {
            "name": self.name, "version": self.version, "formats": list(self.formats),
            "scale_modes": list(self.scale_modes), "roundings": list(self.roundings),
            "input_dtypes": [str(d).replace("torch.", "") for d in self.input_dtypes],
            "output_dtypes": [str(d).replace("torch.", "") for d in self.output_dtypes],
            "devices": list(self.devices), "conventions": dict(self.conventions),
            "stages": [s for s in STAGES if self.provides(s)],
        }


def _dtype(d, name):
    if isinstance(d, torch.dtype):
        return d
    if d in DTYPE_NAMES:
        return DTYPE_NAMES[d]
    raise ValueError(f"implementation {name!r}: unknown dtype {d!r}; expected one of {list(DTYPE_NAMES)}")
