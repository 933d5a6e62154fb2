"""Kernel format of the fused MoE GEMM's expert weights (FusedWeights),
prepared once, at conversion."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

import harness.formats as hf
from harness.formats import scales as _scales

from harness.kernels.precision import RESOLVED_PRECISIONS

# codes a device receives at once when a layer's kernel weights are built from
# codes on the host (from_quantized_by_experts): 512 MiB, a few experts
CHUNK_BYTES = 2**29


@dataclass
class FusedWeights:
    """Kernel format of one expert weight tensor [E, N, K]: packed fp4 / one
    code per byte / float, plus float32 per-block multipliers, all on the
    weights' device (prepared once, at conversion)."""

    kind: int  # 0 float, 1 codes
    data: torch.Tensor
    mult: Optional[torch.Tensor]  # [E, N, K/B] float32 (ieee)
    mult_bf16: Optional[torch.Tensor]  # multipliers for precision "bf16" (nvfp4: raw E4M3 s)
    post_bf16: Optional[torch.Tensor]  # [E] float32 applied after the dot in "bf16" (nvfp4: 1/gs)
    fmt: Optional[str]
    E: int
    N: int
    K: int

    @classmethod
    def from_quantized(cls, q: hf.QuantizedTensor, gscale: Optional[torch.Tensor],
                       precisions: tuple = RESOLVED_PRECISIONS) -> "FusedWeights":
        """`precisions`: the resolved precisions the weights will be run at. A
        two-level row keeps one float32 multiplier per block for each (fl32(s/gs)
        for "ieee", s for "bf16"): preparing only the one a layer runs halves
        that memory (a quarter byte per weight each)."""
        unknown = [p for p in precisions if p not in RESOLVED_PRECISIONS]
        if unknown or not precisions:
            raise ValueError(f"precisions must be a non-empty subset of {RESOLVED_PRECISIONS}, got {precisions!r}")
        spec = q.spec
        E, N, K = q.codes.shape
        if spec.is_mx:
            mult = hf.block_scale_values(q).contiguous()  # the same multipliers serve both precisions
            mult_bf16, post = mult, None
        else:
            if gscale is None:
                raise ValueError(f"{spec.name} fused weights need the per-expert global scale")
            gs = gscale.to(device=q.codes.device, dtype=torch.float32).reshape(-1)
            mult = mult_bf16 = post = None
            if "ieee" in precisions:
                qq = hf.QuantizedTensor(q.codes, q.scales, gs.reshape(-1, 1), spec.name)
                mult = hf.block_scale_values(qq).contiguous()  # fl32(s / gs[e])
            if "bf16" in precisions:
                mult_bf16 = _scales.block_scale_decode(spec, q.scales).contiguous()  # s
                post = (1.0 / gs).contiguous()
        data = hf.pack_fp4(q.codes) if spec.is_fp4 else q.codes.contiguous()
        return cls(1, data.contiguous(), mult, mult_bf16, post, spec.name, E, N, K)

    @classmethod
    def from_quantized_by_experts(cls, q: hf.QuantizedTensor, gscale: Optional[torch.Tensor], device,
                                  precisions: tuple = RESOLVED_PRECISIONS,
                                  chunk_bytes: int = CHUNK_BYTES) -> "FusedWeights":
        """`from_quantized` onto `device` from codes held elsewhere (the host),
        a few experts at a time: each chunk's codes and scales are copied over,
        prepared, and written into the full tensors, allocated once. So the
        device holds the kernel format plus one chunk of codes, never all the
        unpacked codes of a layer (1 byte a weight, more than the layer's kernel
        format). The result is bitwise `from_quantized` on the device."""
        E, N, K = q.codes.shape
        if E == 0:
            raise ValueError(f"from_quantized_by_experts: no experts to build (codes {list(q.codes.shape)})")
        per_expert = max(1, N * K)
        step = max(1, min(E, chunk_bytes // per_expert))
        full: Optional[FusedWeights] = None
        for e0 in range(0, E, step):
            e1 = min(E, e0 + step)
            gs = q.global_scale
            if gs is not None:
                gs = (gs[e0:e1] if gs.dim() and gs.shape[0] == E else gs).to(device)
            part = cls.from_quantized(
                hf.QuantizedTensor(q.codes[e0:e1].to(device), q.scales[e0:e1].to(device), gs, q.fmt, q.scale_mode,
                                   q.rounding, q.dtype),
                None if gscale is None else gscale.reshape(-1)[e0:e1].to(device), precisions=precisions)
            if full is None:
                def alloc(t):
                    return None if t is None else t.new_empty((E,) + tuple(t.shape[1:]))
                mult = alloc(part.mult)
                mult_bf16 = mult if part.mult_bf16 is part.mult else alloc(part.mult_bf16)
                full = cls(part.kind, alloc(part.data), mult, mult_bf16, alloc(part.post_bf16), part.fmt, E, N, K)
            for name in ("data", "mult", "mult_bf16", "post_bf16"):
                src = getattr(part, name)
                if src is not None and not (name == "mult_bf16" and part.mult_bf16 is part.mult):
                    getattr(full, name)[e0:e1].copy_(src)
            del part
        return full

    @classmethod
    def from_float(cls, w: torch.Tensor) -> "FusedWeights":
        E, N, K = w.shape
        return cls(0, w.contiguous(), None, None, None, None, E, N, K)

    @property
    def device(self):
        return self.data.device
