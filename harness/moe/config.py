"""MoEQuantConfig: everything the experts need to know about quantization.

It is SHARED: several experts objects may be built from one config, so nothing
may write into it after construction (an upstream constructor once cleared a
weight scale here and the second experts object lost its scales).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

import harness.formats as hf

from harness.moe.schemes import Scheme, get_scheme


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
            if q.codes.dim() != 3:
                raise ValueError(f"{name} codes must be [E, N, K], got {tuple(q.codes.shape)}")
        if not self.scheme.needs_act_gscale and (self.a1_gscale is not None or self.a2_gscale is not None):
            raise ValueError(f"{self.scheme.name}: a1_gscale/a2_gscale are nvfp4 encode-side scales; "
                             "use a1_scale/a2_scale (decode side) for fp8 activations")
        if (self.w13_bias is None) != (self.w2_bias is None):
            raise ValueError("w13_bias and w2_bias come together; got only one")
        if self.w13_bias is not None:
            E, N13, H = self.w13_q.codes.shape
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
        return self.w13_q.codes.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.w13_q.codes.shape[2]

    @property
    def intermediate_size(self) -> int:
        return self.w2_q.codes.shape[2]

    @property
    def device(self) -> torch.device:
        return self.w13_q.codes.device
