"""32-bit offset overflow (vLLM #44667): the fused dequant+GEMM addresses
expert weights past 2^31 bytes correctly."""
from __future__ import annotations

import dataclasses

import torch

import harness.formats as hf
from harness.moe import reference as ref

from harness.testing.checks.problem import describe_mismatch, gamma
from harness.kernels.fused_gemm import moe_gemm
from harness.kernels.fused_weights import FusedWeights
from harness.kernels.launch_config import MODES


def check_fused_large_offsets(device="cpu", scheme_name="w_mxfp8", E=3, N=32, K=64):
    """The fused dequant+GEMM addresses expert weights past 2^31 bytes
    correctly. The weight codes of expert e live at e * S bytes with
    S = 2^30 + 4096 in one large, mostly untouched allocation (virtual memory
    only: pages that are never written are never committed), so expert 2
    starts beyond 2^31: int32 offset arithmetic wraps there. Rows routed to the
    last expert must equal x @ dequant(W[e]).T (float32 GEMM bound)."""
    scheme = ref.resolve_scheme(scheme_name)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(E, N, K, generator=g)
    q = hf.quantize(w, scheme.weight_fmt, scale_mode=scheme.scale_mode)
    fw = FusedWeights.from_quantized(q, None)
    fw = dataclasses.replace(fw, data=fw.data.to(device), scales=fw.scales.to(device))
    S = 2**30 + 4096
    Kd = fw.data.shape[-1]
    big = torch.empty(E * S, dtype=torch.uint8, device=device)
    data = big.as_strided((E, N, Kd), (S, Kd, 1))
    data.copy_(fw.data)
    fw_big = dataclasses.replace(fw, data=data)
    P = 8
    x = hf.qdq(torch.randn(P, K, generator=g), "mxfp8_e4m3").to(device)
    ids = torch.tensor([E - 1] * (P - 2) + [0, 1], dtype=torch.int64, device=device)
    wd = ref.dequant_weight(q, None, scheme, "w")
    want = torch.stack([x[p].cpu().double() @ wd[int(ids[p])].T for p in range(P)])
    tol = 2 * gamma(K) * torch.stack([x[p].cpu().double().abs() @ wd[int(ids[p])].abs().T for p in range(P)]) + 2.0**-140
    modes = [m for m in MODES if m != "auto"]
    for mode in modes:
        out = moe_gemm(x, ids, fw_big, precision="ieee", mode=mode)
        err = (out.cpu().double() - want).abs()
        bad = ~(err <= tol)
        assert not bool(bad.any()), describe_mismatch(
            f"fused GEMM (mode {mode}) with expert offsets up to {(E - 1) * S} bytes", out.cpu(), want, tol, bad)
    return {"max_offset": (E - 1) * S, "modes": modes}
