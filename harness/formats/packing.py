"""FP4 packing: two codes per byte along the last dim, element 2i in the LOW
nibble, 2i+1 in the HIGH nibble (vLLM, torchao, Quark)."""
from __future__ import annotations

import torch


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    if codes.dtype != torch.uint8:
        raise ValueError(f"pack_fp4 expects uint8 codes, got {codes.dtype}")
    if codes.dim() == 0 or codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4 needs an even last dimension, got shape {tuple(codes.shape)}")
    # Value check on the host only for CPU tensors: reading a device tensor
    # would sync the stream (and is refused during CUDA graph capture).
    if codes.device.type == "cpu" and codes.numel() and int(codes.max()) > 0xF:
        raise ValueError("pack_fp4: codes must be 4-bit values (0..15)")
    lo, hi = codes[..., 0::2], codes[..., 1::2]
    return (lo | (hi << 4)).contiguous()


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    if packed.dtype != torch.uint8:
        raise ValueError(f"unpack_fp4 expects uint8 bytes, got {packed.dtype}")
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
