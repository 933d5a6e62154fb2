"""Triton kernels on the GPU: bit-exact to the CPU reference at larger shapes,
CUDA-graph capture, opcheck, torch.compile(fullgraph=True), int64 offsets.

Every test is marked gpu (skipped cleanly without one). The reference runs on
CPU (the oracle); kernel outputs are copied back and compared bit for bit.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import harness.formats as hf
import harness.kernels as hk
import harness.strategies as hs
from harness.testing.checks.bitwise import assert_bitwise_equal
from suites.properties import kernel_properties
from suites.properties.kernel_properties import DTYPES, FMTS, check_all_kernels, corner_tensor, options

pytestmark = pytest.mark.gpu
DEV = "cuda"
# Example counts come from the profile; shrinking is off here because GPU time
# is scarce (a failure still prints its full example; rerun on CPU to shrink).
NO_SHRINK = settings(phases=[Phase.explicit, Phase.reuse, Phase.generate])


@pytest.mark.parametrize("fmt", FMTS)
@NO_SHRINK
@given(data=st.data())
def test_kernels_match_reference_gpu(fmt, data):
    case = data.draw(hs.block_tensors(fmt, allow_nan_inf=True, max_rows=64, max_blocks=8), label="case")
    mode, gs = options(fmt, data.draw(hs.scale_modes(), label="mode"), data.draw(hs.global_scales(), label="gs"))
    check_all_kernels(case.x, fmt, mode, data.draw(hs.roundings(), label="rounding"), gs, device=DEV)


def _spread_tensor(fmt, dtype, rows=256, seed=0):
    """randn blocks scaled by 2^e, e per block over the dtype's range, plus the
    corner blocks: many tile-sized programs, masked tails included."""
    spec = hf.FORMATS[fmt]
    g = torch.Generator().manual_seed(seed)
    lo, hi = (-14, 14) if dtype == torch.float16 else (-120, 120)
    cols = 3 * spec.block_size * 5
    x = torch.randn(rows, cols, generator=g)
    e = torch.randint(lo, hi, (rows, cols // spec.block_size, 1), generator=g).float()
    x = (x.reshape(rows, -1, spec.block_size) * torch.exp2(e)).reshape(rows, cols)
    corners = corner_tensor(fmt, torch.float32)[:rows]
    x[: corners.shape[0], : spec.block_size] = corners
    return x.to(dtype)


@pytest.mark.parametrize("fmt", FMTS)
def test_every_mode_rounding_dtype_large(fmt):
    spec = hf.FORMATS[fmt]
    modes = hf.SCALE_MODES if spec.is_mx else ("floor",)
    for mode, rounding, dtype in itertools.product(modes, hf.ROUNDINGS, DTYPES):
        gs = None if spec.is_mx else 2688.0 / 1000.0
        check_all_kernels(_spread_tensor(fmt, dtype), fmt, mode, rounding, gs, device=DEV)


def test_nvfp4_global_scale_per_expert_gpu():
    x = _spread_tensor("nvfp4", torch.bfloat16, rows=96).reshape(4, 24, -1)
    gs = torch.tensor([1.0, 2688.0 / 3.0, 1e-3, 77.7]).reshape(4, 1)
    check_all_kernels(x, "nvfp4", "floor", "rne", gs, device=DEV)
    check_all_kernels(x, "nvfp4", "floor", "away", torch.linspace(0.5, 900.0, 24), device=DEV)


@pytest.mark.parametrize("fmt", FMTS)
def test_dequantize_weights_gpu(fmt):
    spec = hf.FORMATS[fmt]
    E = 5
    w = _spread_tensor(fmt, torch.float32, rows=E * 40).reshape(E, 40, -1)
    gs = None if spec.is_mx else torch.linspace(1.0, 5000.0, E)
    q = hf.quantize(w, fmt, "floor", "rne", None if gs is None else gs.reshape(E, 1))
    for dtype in DTYPES:
        want = hf.dequantize(q, dtype)
        for stored in [q.codes] + ([hf.pack_fp4(q.codes)] if spec.is_fp4 else []):
            got = hk.dequantize_weights(stored.to(DEV), q.scales.to(DEV), None if gs is None else gs.to(DEV), fmt, dtype)
            assert_bitwise_equal(got.cpu(), want, f"{fmt} {dtype} {tuple(stored.shape)}")


@pytest.mark.parametrize("fmt", [f for f in FMTS if hf.FORMATS[f].is_fp4])
def test_packed_quantize_gpu(fmt):
    """The packed fp4 kernel (input read as words of two elements) for every
    input dtype and both roundings, with a masked tail (rows not a tile multiple)."""
    spec = hf.FORMATS[fmt]
    for dtype, rounding in itertools.product(DTYPES, hf.ROUNDINGS):
        x = _spread_tensor(fmt, dtype, rows=203, seed=3)
        mode, gs = ("even", None) if spec.is_mx else ("floor", 2688.0 / 5000.0)
        want = hf.quantize(x, fmt, mode, rounding, gs)
        packed, scales = hk.quantize_packed(x.to(DEV), fmt, mode, rounding, gs)
        assert torch.equal(packed.cpu(), hf.pack_fp4(want.codes)), f"{fmt} {dtype} {rounding}"
        assert torch.equal(scales.cpu(), want.scales)


def test_auto_backend_on_gpu_is_triton():
    assert hk.resolve_backend("auto", torch.device(DEV)) == "triton"


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp6_e2m3", "mxfp8_e5m2"])
def test_cuda_graph_capture_replay_equals_eager(fmt):
    spec = hf.FORMATS[fmt]
    x = _spread_tensor(fmt, torch.bfloat16, rows=64, seed=1).to(DEV)
    gs = None if spec.is_mx else torch.tensor(300.0, device=DEV)
    gs_e = None if spec.is_mx else torch.tensor([300.0], device=DEV)
    mode = "rceil" if spec.is_mx else "floor"

    def step(inp):
        y = hk.qdq(inp, fmt, mode, "away", gs)
        p, s = hk.quantize_packed(inp, fmt, mode, "rne", gs)
        w = hk.dequantize_weights(p.unsqueeze(0), s.unsqueeze(0), gs_e, fmt, torch.float16)
        return y, p, s, w

    step(x)  # compile outside the capture
    torch.cuda.synchronize()
    static_x = x.clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = step(static_x)
    new = _spread_tensor(fmt, torch.bfloat16, rows=64, seed=2).to(DEV)
    static_x.copy_(new)
    g.replay()
    torch.cuda.synchronize()
    for got, want in zip(outs, step(new)):
        if got.is_floating_point():
            assert_bitwise_equal(got.cpu(), want.cpu(), fmt)
        else:
            assert torch.equal(got, want)


def test_opcheck_gpu():
    # finite input: opcheck compares outputs with assert_close, where NaN != NaN
    x = torch.nan_to_num(_spread_tensor("mxfp4", torch.bfloat16, rows=16), nan=0.0, posinf=1.0, neginf=-1.0).to(DEV)
    gs = torch.tensor([100.0], device=DEV)
    for fmt, mode in (("mxfp4", "even"), ("mxfp8_e4m3", "ceil")):
        torch.library.opcheck(hk.qdq_op, (x, None, fmt, mode, "rne", "triton"))
        torch.library.opcheck(hk.quantize_op, (x, None, fmt, mode, "away", True, "triton"))
        codes, scales = hk.quantize_op(x, None, fmt, mode, "rne", True, "triton")
        torch.library.opcheck(hk.dequantize_op, (codes, scales, None, fmt, hf.FORMATS[fmt].is_fp4, torch.bfloat16, "triton"))
    torch.library.opcheck(hk.qdq_op, (x, gs, "nvfp4", "floor", "rne", "triton"))
    torch.library.opcheck(hk.quantize_op, (x, gs, "nvfp4", "floor", "rne", False, "triton"))


def test_compile_fullgraph_equals_eager_gpu():
    torch._dynamo.reset()

    def f(x, gs, gs_e):
        y = hk.qdq(x, "nvfp4", global_scale=gs)
        p, s = hk.quantize_packed(y, "mxfp4", scale_mode="even")
        w = hk.dequantize_weights(p.unsqueeze(0), s.unsqueeze(0), None, "mxfp4", torch.bfloat16)
        q = hk.quantize_packed(x, "nvfp4", global_scale=gs)
        return w + 1, hk.dequantize_weights(q[0].unsqueeze(0), q[1].unsqueeze(0), gs_e, "nvfp4", torch.float32)

    x = _spread_tensor("mxfp4", torch.bfloat16, rows=32).to(DEV)
    gs, gs_e = torch.tensor(123.0, device=DEV), torch.tensor([123.0], device=DEV)
    got = torch.compile(f, fullgraph=True)(x, gs, gs_e)
    for a, b in zip(got, f(x, gs, gs_e)):
        assert_bitwise_equal(a.cpu(), b.cpu())


def test_offsets_past_int32():
    """More than 2^31 elements (4 GiB of bf16; codes past 2^31 bytes): int32
    offsets would wrap and write the head of the tensor twice. Blocks are
    independent, so head and tail slices are checked against the reference."""
    n = (1 << 31) + 64 * 1024
    x = torch.empty(n // 1024, 1024, dtype=torch.bfloat16, device=DEV)
    x.normal_()
    x[-3:] *= 1e4
    tail, head = slice(-64, None), slice(0, 64)
    y = hk.qdq(x, "mxfp4", "even", "rne")
    for sl in (head, tail):
        assert_bitwise_equal(y[sl].cpu(), hf.qdq(x[sl].cpu(), "mxfp4", "even", "rne"), f"qdq {sl}")
    del y
    q = hk.quantize(x, "mxfp8_e4m3")
    for sl in (head, tail):
        ref = hf.quantize(x[sl].cpu(), "mxfp8_e4m3")
        assert torch.equal(q.codes[sl].cpu(), ref.codes) and torch.equal(q.scales[sl].cpu(), ref.scales)
    del x
    d = hk.dequantize(q, torch.bfloat16)
    for sl in (head, tail):
        qs = hf.QuantizedTensor(codes=q.codes[sl].cpu(), scales=q.scales[sl].cpu(), global_scale=None, fmt="mxfp8_e4m3")
        assert_bitwise_equal(d[sl].cpu(), hf.dequantize(qs, torch.bfloat16), f"dequantize {sl}")


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8_e4m3"])
def test_quantize_launch_shapes_gpu(fmt):
    """Compiled quantize kernels at several tiles x tiles-per-program (the
    prefetching loop), each over a ragged tail: bytes equal the reference."""
    from harness.kernels import launch

    spec = hf.FORMATS[fmt]
    x = _spread_tensor(fmt, torch.bfloat16, rows=333, seed=4)
    gs = None if spec.is_mx else hf.nvfp4_global_scale(x.float().abs().amax()).reshape(1)
    want = hf.quantize(x, fmt, global_scale=gs)
    xd, gsd = x.to(DEV), None if gs is None else gs.to(DEV)
    for tile_blocks, tpp in ((128, 2), (64, 4), (256, 3), (32, 1)):
        kw = dict(tile_elems=tile_blocks * spec.block_size, tiles_per_program=tpp)
        codes, scales = launch.quantize(xd, gsd, fmt, "floor", "rne", False, **kw)
        assert torch.equal(codes.cpu(), want.codes) and torch.equal(scales.cpu(), want.scales), (fmt, kw)
        if spec.is_fp4:
            packed, scales = launch.quantize(xd, gsd, fmt, "floor", "rne", True, **kw)
            assert torch.equal(packed.cpu(), hf.pack_fp4(want.codes)) and torch.equal(scales.cpu(), want.scales), kw


def test_qdq_bf16_operand_is_the_ops_gpu():
    kernel_properties.bf16_operand_is_the_ops("cuda")
