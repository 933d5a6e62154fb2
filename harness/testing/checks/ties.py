"""Rounding of exact ties (AMD Quark tie rounding): the layer's activation QDQ
rounds half to even on inputs that are exact midpoints between codes."""
from __future__ import annotations

import math

import torch

import harness.formats as hf
import harness.moe.quantize_input as qi
from harness.formats import minifloat
from harness.moe import reference as ref

from harness.testing.checks.bitwise import assert_bitwise_equal
from harness.testing.checks.problem import F32, F64


def tie_blocks(fmt: str, rows: int = 4, seed: int = 0):
    """float32 [rows, 2 blocks] whose elements are EXACT midpoints between
    adjacent element codes after scaling (k + 1/2 code steps), each block
    anchored by +-max_normal so its scale is a known power of two; for nvfp4
    use global_scale = 2^j (returned) so that s and gs/s are powers of two too.
    Returns (x, global_scale or None)."""
    spec = hf.FORMATS[fmt]
    el = spec.element
    vals = sorted({minifloat.decode_value(el, c) for c in range(el.sign_bit)} - {math.nan})
    vals = [v for v in vals if math.isfinite(v)]
    mids = torch.tensor([(a + b) / 2 for a, b in zip(vals, vals[1:])], dtype=F64)
    g = torch.Generator().manual_seed(seed)
    B = spec.block_size
    n = rows * 2
    pick = mids[torch.randint(0, len(mids), (n, B), generator=g)]
    sign = torch.where(torch.rand(n, B, generator=g) < 0.5, -1.0, 1.0).double()
    blk = pick * sign
    blk[:, 0] = el.max_normal * sign[:, 0]
    e = torch.randint(-3, 4, (n, 1), generator=g).double()
    if spec.has_global_scale:
        # amax = 6 * 2^e; gs = 2^j with j such that gs*amax/6 = 2^(j+e) is a normal E4M3.
        gs = torch.tensor(2.0**3, dtype=F32)
        x = blk * torch.pow(2.0, e)
        return x.reshape(rows, 2 * B).to(F32), gs
    x = blk * torch.pow(2.0, e)
    return x.reshape(rows, 2 * B).to(F32), None


def check_activation_qdq_ties(scheme_name: str, backends=("torch",)):
    """On exact tie inputs, the layer's activation QDQ (the dispatcher, with
    each op backend) equals the spec (round half to EVEN) bit for bit, and the
    inputs really are ties (rounding half AWAY gives a different result)."""
    scheme = ref.resolve_scheme(scheme_name)
    if scheme.act_block_fmt is None:
        return {"skipped": True}
    x, gs = tie_blocks(scheme.act_fmt)
    kw = {} if gs is None else {"global_scale": gs}
    mode = {} if gs is not None else {"scale_mode": scheme.scale_mode}
    want = hf.qdq(x, scheme.act_fmt, rounding="rne", **mode, **kw)
    away = hf.qdq(x, scheme.act_fmt, rounding="away", **mode, **kw)
    assert not torch.equal(want, away), "tie inputs are not ties (test construction)"
    for backend in backends:
        got, _ = qi.moe_kernel_quantize_input(x, gs, scheme.quant_dtype, scale_mode=scheme.scale_mode, backend=backend)
        assert_bitwise_equal(got, want, f"{scheme.name} activation QDQ on exact ties (backend {backend}) vs spec RNE")
    return {}
