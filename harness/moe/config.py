"""MoEQuantConfig: everything the experts need to know about quantization.

It is SHARED: several experts objects may be built from one config, so nothing
may write into it after construction (an upstream constructor once cleared a
weight scale here and the second experts object lost its scales).

Released codes. A fused experts object built with keep_codes=False holds, once
its kernel weights are built, its own copy of the config (`without_codes()`)
whose w13_q / w2_q are `ReleasedCodes`: the shape, format and device facts
stay, the unpacked codes and block scales are gone (the config it was given is
not written; the tensors are freed when the last holder of that config lets it
go, and the build paths hold none). Every later reader of the codes (the
unfused path, the float64 reference and the certified oracle, conversion, any
`.codes` / `.scales` access) raises CodesReleasedError naming the tensor and
how to keep it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Union

import torch

import harness.formats as hf

from harness.moe.schemes import Scheme, get_scheme


KEEP_CODES_HINT = ("build the layer with keep_codes=True (the eval keeps them when the config asks for the "
                   "certified oracle, harness.gates.kl.oracle_max)")


class CodesReleasedError(RuntimeError):
    """A reader asked for expert weight codes that a fused layer released (keep_codes=False)."""


@dataclass(frozen=True)
class ReleasedCodes:
    """Stands in for the QuantizedTensor `name` (w13_q / w2_q) of a quant config
    whose fused layer released it: shape, format and device stay readable;
    codes, scales, global_scale and anything else raise CodesReleasedError."""

    name: str
    fmt: str
    shape: torch.Size
    device: torch.device

    @classmethod
    def of(cls, name: str, q) -> "ReleasedCodes":
        if isinstance(q, ReleasedCodes):
            return q
        return cls(name, q.fmt, q.codes.shape, q.codes.device)

    @property
    def spec(self):
        return hf.get_format(self.fmt)

    def refuse(self, what: str):
        raise CodesReleasedError(
            f"{self.name}.{what}: the unpacked {self.fmt} expert weight codes and block scales "
            f"{list(self.shape)} were released once the fused kernel weights were built (keep_codes=False); "
            f"the unfused backend, the float64 reference / certified oracle and conversion need them: "
            f"{KEEP_CODES_HINT}")

    codes = property(lambda self: self.refuse("codes"))
    scales = property(lambda self: self.refuse("scales"))
    global_scale = property(lambda self: self.refuse("global_scale"))

    def __getattr__(self, attr):  # only for names the stand-in does not have
        if attr.startswith("__"):
            raise AttributeError(attr)
        self.refuse(attr)


def require_codes(cfg, reader: str) -> None:
    """CodesReleasedError naming `reader` when `cfg` (a quant config, or None)
    has released its codes."""
    if cfg is not None and getattr(cfg, "codes_released", False):
        raise CodesReleasedError(
            f"{reader} reads the expert weight codes (w13_q, w2_q), which this fused layer released once its "
            f"kernel weights were built (keep_codes=False): {KEEP_CODES_HINT}")


@dataclass
class MoEQuantConfig:
    scheme: Union[str, Scheme]
    w13_q: Optional[hf.QuantizedTensor]  # [E, 2I, H] codes (one per byte) + block scales
    w2_q: Optional[hf.QuantizedTensor]  # [E, H, I]
    w13_gscale: Optional[torch.Tensor] = None  # nvfp4: per-expert ENCODE-side global scale [E]
    w2_gscale: Optional[torch.Tensor] = None
    a1_scale: Optional[torch.Tensor] = None  # static input scale (fp8: decode side, x ~= q * a1_scale)
    a1_gscale: Optional[torch.Tensor] = None  # nvfp4: ENCODE-side activation global scale (scalar)
    a2_scale: Optional[torch.Tensor] = None
    a2_gscale: Optional[torch.Tensor] = None
    # Per-expert biases (gpt-oss), float and unquantized, added to each GEMM's
    # output after the dequantized weights' full scaling (as vLLM's w1_bias /
    # w2_bias): w13_bias [E, 2I] (gate then up, the w13 row layout), w2_bias [E, H].
    w13_bias: Optional[torch.Tensor] = None
    w2_bias: Optional[torch.Tensor] = None

    def __post_init__(self):
        self.scheme = get_scheme(self.scheme)
        if self.scheme.weight_fmt is None:
            raise ValueError("MoEQuantConfig needs a quantized scheme; 'bf16' has no quant config")
        for name in ("w13_q", "w2_q"):
            q = getattr(self, name)
            if q is None:
                raise ValueError(f"{name} is required")
            if q.fmt != self.scheme.weight_fmt:
                raise ValueError(f"{name} is {q.fmt}, scheme {self.scheme.name} stores {self.scheme.weight_fmt}")
            if len(q.shape) != 3:
                raise ValueError(f"{name} codes must be [E, N, K], got {tuple(q.shape)}")
        if not self.scheme.needs_act_gscale and (self.a1_gscale is not None or self.a2_gscale is not None):
            raise ValueError(f"{self.scheme.name}: a1_gscale/a2_gscale are nvfp4 encode-side scales; "
                             "use a1_scale/a2_scale (decode side) for fp8 activations")
        if (self.w13_bias is None) != (self.w2_bias is None):
            raise ValueError("w13_bias and w2_bias come together; got only one")
        if self.w13_bias is not None:
            E, N13, H = self.w13_q.shape
            want = {"w13_bias": (E, N13), "w2_bias": (E, H)}
            for name, shape in want.items():
                b = getattr(self, name)
                if tuple(b.shape) != shape or not b.dtype.is_floating_point:
                    raise ValueError(f"{name} must be a float tensor of shape {list(shape)}, got {b.dtype} "
                                     f"{list(b.shape)}")
        if self.scheme.two_level:
            for name in ("w13_gscale", "w2_gscale"):
                if getattr(self, name) is None:
                    raise ValueError(f"{self.scheme.name}: {name} (per-expert encode-side global scale [E]) "
                                     "is required")

    @property
    def quant_dtype(self) -> Optional[str]:
        return self.scheme.quant_dtype

    @property
    def num_experts(self) -> int:
        return self.w13_q.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.w13_q.shape[2]

    @property
    def intermediate_size(self) -> int:
        return self.w2_q.shape[2]

    @property
    def device(self) -> torch.device:
        q = self.w13_q
        return q.device if isinstance(q, ReleasedCodes) else q.codes.device

    @property
    def codes_released(self) -> bool:
        return isinstance(self.w13_q, ReleasedCodes)

    def without_codes(self, device=None) -> "MoEQuantConfig":
        """A NEW config with w13_q / w2_q replaced by ReleasedCodes stand-ins
        (everything else shared); this one is not written. `device`: the new
        config's scales and biases are copied there and its stand-ins say so
        (codes unpacked on the host for kernel weights built on a GPU)."""
        out = dataclasses.replace(self, w13_q=ReleasedCodes.of("w13_q", self.w13_q),
                                  w2_q=ReleasedCodes.of("w2_q", self.w2_q))
        if device is None:
            return out
        dev = torch.device(device)
        moved = {f.name: getattr(out, f.name).to(dev) for f in dataclasses.fields(out)
                 if isinstance(getattr(out, f.name), torch.Tensor)}
        moved.update({n: dataclasses.replace(getattr(out, n), device=dev) for n in ("w13_q", "w2_q")})
        return dataclasses.replace(out, **moved)
