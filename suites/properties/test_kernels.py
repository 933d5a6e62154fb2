"""Triton kernels == the torch reference, bit for bit (CPU, Triton interpreter).

backend="triton" on CPU tensors runs the kernels in the Triton interpreter
(harness.kernels.loader loads an interpreted copy of the kernel source, so no
TRITON_INTERPRET set-up is needed). Shapes stay tiny: the interpreter costs
about 20 ms a launch. Zero tolerance: bit patterns compared, NaN == NaN,
-0.0 != +0.0. The comparison, the corner inputs and the property bodies
shared with the GPU and synthetic-row suites are in kernel_properties.py.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import harness.formats as hf
import harness.kernels as hk
import harness.strategies as hs
from harness.testing.checks.bitwise import assert_bitwise_equal
from suites.properties import kernel_properties
from suites.properties.kernel_properties import DTYPES, FMTS, check_all_kernels


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FMTS)
@given(data=st.data())
def test_kernels_match_reference(fmt, data):
    kernel_properties.kernels_match_reference(fmt, data)


@pytest.mark.slow
@given(data=st.data())
def test_nvfp4_global_scale_per_row_group(data):
    """One global scale per leading row group ([G, 1] for x [G, R, K]), and a
    scale that varies along the second leading dim ([R] for x [G, R, K])."""
    case = data.draw(hs.block_tensors("nvfp4", allow_nan_inf=True, max_rows=4, max_blocks=2), label="case")
    groups = data.draw(st.sampled_from([1, 2]), label="groups")
    x = case.x.repeat(groups, 1).reshape(groups, case.x.shape[0], case.x.shape[1])
    if data.draw(st.booleans(), label="per expert"):
        shape = (groups, 1)
    else:
        shape = (x.shape[1],)
    n = math.prod(shape)
    vals = data.draw(st.lists(hs.global_scales(allow_none=False), min_size=n, max_size=n), label="gs")
    gs = torch.tensor(vals, dtype=torch.float32).reshape(shape)
    check_all_kernels(x, "nvfp4", "floor", data.draw(hs.roundings(), label="rounding"), gs)


@pytest.mark.parametrize("fmt", FMTS)
@given(data=st.data())
def test_dequantize_any_bytes(fmt, data):
    """Every code byte (NaN / Inf codes included) and every scale byte (E8M0
    0xFF, E4M3 NaN and negative scales included) decodes like the reference."""
    kernel_properties.dequantize_any_bytes(fmt, data)


@pytest.mark.parametrize("fmt", FMTS)
def test_every_mode_rounding_dtype_on_corners(fmt):
    """The full product of scale modes x roundings x input dtypes on the corner
    tensor (hypothesis draws these at random; this makes every combination run)."""
    kernel_properties.every_mode_rounding_dtype_on_corners(fmt)


@given(data=st.data())
def test_dequantize_weights_matches_reference(data):
    fmt = data.draw(hs.formats(), label="fmt")
    spec = hf.FORMATS[fmt]
    E = data.draw(st.integers(1, 3), label="E")
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32,), max_rows=2, max_blocks=2), label="w")
    w = case.x.repeat(E, 1, 1) * torch.arange(1, E + 1, dtype=torch.float32).reshape(E, 1, 1)
    gs = None
    if not spec.is_mx:
        vals = data.draw(st.lists(hs.global_scales(allow_none=False), min_size=E, max_size=E), label="gs")
        gs = torch.tensor(vals, dtype=torch.float32)
    mode = data.draw(hs.scale_modes(), label="mode") if spec.is_mx else "floor"
    q = hf.quantize(w, fmt, mode, "rne", None if gs is None else gs.reshape(E, 1))
    dtype = data.draw(hs.dtypes(DTYPES), label="dtype")
    want = hf.dequantize(q, dtype)
    stored = [q.codes] + ([hf.pack_fp4(q.codes)] if spec.is_fp4 else [])
    for s in stored:
        got = hk.dequantize_weights(s, q.scales, gs, fmt, dtype, backend="triton")
        assert_bitwise_equal(got, want, f"{fmt} {dtype} stored {tuple(s.shape)}")


def test_fp4_nibble_order():
    """torchao's check: [0.0, 0.5, 4.0, -0.0] packs to 0b00010000, 0b10000110."""
    x = torch.tensor([0.0, 0.5, 4.0, -0.0] * 8).reshape(1, 32) * 1.0
    x[0, 4:] = 0.0
    x[0, 31] = 6.0  # amax 6: scale 2^0 for mxfp4 floor
    packed, _ = hk.quantize_packed(x, "mxfp4", backend="triton")
    assert packed[0, :2].tolist() == [0b00010000, 0b10000110]


def test_auto_backend_on_cpu_is_reference():
    x = torch.randn(2, 64)
    assert hk.resolve_backend("auto", x.device) == "torch"
    assert_bitwise_equal(hk.qdq(x, "mxfp4"), hf.qdq(x, "mxfp4"))
    with pytest.raises(ValueError, match="backend"):
        hk.qdq(x, "mxfp4", backend="cuda")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_errors_match_reference(backend):
    x = torch.randn(2, 48)
    for call in (
        lambda f: f(x, "mxfp4"),  # K not a multiple of 32
        lambda f: f(x[:, :32], "nvfp4", scale_mode="ceil"),
        lambda f: f(x[:, :32], "mxfp4", global_scale=1.0),
        lambda f: f(x[:, :32], "nvfp4", global_scale=-1.0),
        lambda f: f(x[:, :32], "mxfp4", rounding="down"),
    ):
        with pytest.raises(ValueError) as ref:
            call(hf.qdq)
        with pytest.raises(ValueError) as got:
            call(lambda *a, **k: hk.qdq(*a, **k, backend=backend))
        assert str(got.value) == str(ref.value)


def test_opcheck_cpu_interpreter():
    x = torch.randn(2, 32)
    gs = torch.tensor([100.0])
    torch.library.opcheck(hk.qdq_op, (x, None, "mxfp4", "even", "away", "triton"))
    torch.library.opcheck(hk.qdq_op, (x, gs, "nvfp4", "floor", "rne", "triton"))
    torch.library.opcheck(hk.qdq_op, (x, gs, "nvfp4", "floor", "rne", "triton", True))
    torch.library.opcheck(hk.qdq_op, (x, None, "mxfp6_e2m3", "even", "rne", "triton", True))
    torch.library.opcheck(hk.quantize_op, (x, gs, "nvfp4", "floor", "rne", True, "triton"))
    codes, scales = hk.quantize_op(x, None, "mxfp6_e3m2", "floor", "rne", False, "triton")
    torch.library.opcheck(hk.dequantize_op, (codes, scales, None, "mxfp6_e3m2", False, torch.bfloat16, "triton"))


def test_compile_fullgraph_traces_the_ops():
    """The public functions trace without graph breaks (aot_eager: no C++
    toolchain needed on CPU; the GPU suite compiles with inductor)."""
    torch._dynamo.reset()

    def f(x, gs):
        y = hk.qdq(x, "nvfp4", global_scale=gs, backend="triton")
        p, s = hk.quantize_packed(y, "mxfp4", backend="triton")
        return hk.dequantize_weights(p.unsqueeze(0), s.unsqueeze(0), None, "mxfp4", torch.float32, backend="triton")

    x = torch.randn(2, 64)
    gs = torch.tensor(50.0)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, gs)
    assert_bitwise_equal(got, f(x, gs))


def test_odd_offset_view_and_op_without_global_scale():
    """A contiguous view starting at an odd element (the packed kernel reads
    element pairs as words), and the raw ops called with global_scale=None for
    nvfp4 (1.0, as the reference)."""
    flat = torch.randn(1 + 64).bfloat16()
    x = flat[1:65]
    packed, scales = hk.quantize_packed(x, "mxfp4", backend="triton")
    want = hf.quantize(x, "mxfp4")
    assert torch.equal(packed, hf.pack_fp4(want.codes)) and torch.equal(scales, want.scales)
    x2 = x.reshape(2, 32)
    assert_bitwise_equal(hk.qdq_op(x2, None, "nvfp4", "floor", "rne", "triton"), hf.qdq(x2, "nvfp4"))
    codes, scales = hk.quantize_op(x2, None, "nvfp4", "floor", "away", True, "triton")
    want = hf.quantize(x2, "nvfp4", rounding="away")
    assert torch.equal(codes, hf.pack_fp4(want.codes))
    assert_bitwise_equal(hk.dequantize_op(codes, scales, None, "nvfp4", True, torch.float32, "triton"), hf.dequantize(want))


def _nvfp4_scale_tie_amaxes():
    """float32 amaxes whose block scale gs * (amax * fl(1/6)) (gs = 1) is an
    exact midpoint between adjacent E4M3 values, normal and subnormal."""
    e4m3 = hf.FORMATS["mxfp8_e4m3"].element
    vals = sorted({hf.decode_value(e4m3, c) for c in range(0x7F)})  # 0 .. 448
    sixth = torch.tensor(1.0 / 6.0, dtype=torch.float32)
    out = []
    for a, b in list(zip(vals, vals[1:]))[::7]:
        t = torch.tensor((a + b) / 2, dtype=torch.float32)
        guess = (t * 6).view(torch.int32)
        for d in range(-4, 5):
            amax = (guess + d).view(torch.float32)
            if torch.equal(amax * sixth, t):
                out.append(float(amax))
                break
    return out


def test_nvfp4_block_scale_ties():
    """Block scales that are exact E4M3 ties round half to even (a tie rounded
    away would change both the scale byte and every element)."""
    amaxes = _nvfp4_scale_tie_amaxes()
    assert len(amaxes) >= 8
    g = torch.Generator().manual_seed(0)
    x = torch.rand(len(amaxes), 16, generator=g) * 2 - 1
    x = x * torch.tensor(amaxes).reshape(-1, 1)
    x[:, 3] = torch.tensor(amaxes)
    for rounding in hf.ROUNDINGS:
        check_all_kernels(x, "nvfp4", "floor", rounding, 1.0)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp6_e3m2"])
def test_quantize_several_tiles_per_program(fmt):
    """Quantize programs that run several tiles, each loading the next before
    working on the current one (the GPU default), over a ragged tail: the same
    codes, packed bytes and scales as the reference. A lost or stale prefetch
    (a tile quantized twice, a tail tile read from the wrong place) differs."""
    from harness.kernels import launch

    spec = hf.FORMATS[fmt]
    g = torch.Generator().manual_seed(11)
    mag = torch.exp2(torch.randint(-12, 12, (13, 2, 1), generator=g).float())
    x = (torch.randn(13, 2, spec.block_size, generator=g) * mag).reshape(13, 2 * spec.block_size).to(torch.bfloat16)
    gs = None if spec.is_mx else hf.nvfp4_global_scale(x.float().abs().amax()).reshape(1)
    want = hf.quantize(x, fmt, global_scale=gs)
    for bpp, tpp in ((1, 3), (2, 4), (4, 2), (32, 1)):  # 26 blocks: every split has a partial last program
        where = f"{fmt} blocks/tile={bpp} tiles/program={tpp}"
        codes, scales = launch.quantize(x, gs, fmt, "floor", "rne", False, tile_elems=bpp * spec.block_size,
                                        tiles_per_program=tpp)
        assert torch.equal(codes, want.codes) and torch.equal(scales, want.scales), where
        if spec.is_fp4:
            packed, scales = launch.quantize(x, gs, fmt, "floor", "rne", True, tile_elems=bpp * spec.block_size,
                                             tiles_per_program=tpp)
            assert torch.equal(packed, hf.pack_fp4(want.codes)) and torch.equal(scales, want.scales), where


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp6_e3m2", "mxfp8_e5m2"])
def test_qdq_and_dequantize_over_several_programs(fmt):
    """The interpreter runs one program for up to 256 blocks (launch.INTERP_MAX_BPP),
    so a wrong per-program offset passes every test above. Here the launchers'
    tile_elems forces 1 to 32 blocks per program over 26 blocks (even splits
    and ragged tails), with a global scale per row (two blocks each, so
    programs start mid-row), qdq and dequantize (codes and packed fp4) vs the
    reference."""
    from harness.kernels import launch
    from harness.kernels.api import rows_global_scale

    spec = hf.FORMATS[fmt]
    B = spec.block_size
    g = torch.Generator().manual_seed(12)
    mag = torch.exp2(torch.randint(-12, 12, (13, 2, 1), generator=g).float())
    x = (torch.randn(13, 2, B, generator=g) * mag).reshape(13, 2 * B)
    gs = None if spec.is_mx else torch.tensor([[900.0], [37.5], [4000.0]]).repeat_interleave(5, 0)[:13]
    want = hf.quantize(x, fmt, global_scale=gs)
    gs_rows = None if gs is None else rows_global_scale(gs, x.shape[:-1])
    stored = [(want.codes, False)] + ([(hf.pack_fp4(want.codes), True)] if spec.is_fp4 else [])
    for bpp in (1, 2, 4, 8, 32):  # 26 blocks: 26, 13 programs (even), 7, 4, 1 (ragged last program)
        where = f"{fmt} blocks/program={bpp}"
        y = launch.qdq(x, gs_rows, fmt, "floor", "rne", tile_elems=bpp * B)
        assert_bitwise_equal(y, hf.dequantize(want, x.dtype), "qdq " + where)
        for codes, packed in stored:
            for dtype in (torch.float32, torch.bfloat16):
                got = launch.dequantize(codes, want.scales, gs_rows, fmt, packed, dtype, tile_elems=bpp * B)
                assert_bitwise_equal(got, hf.dequantize(want, dtype), f"dequantize packed={packed} {dtype} " + where)


# ---------------------------------------------------------------- bad input: reference == kernels

def _outcome(call):
    try:
        return "ok", call()
    except Exception as exc:  # the exception itself is compared
        return type(exc).__name__, str(exc)


def _bad_dequantize_inputs():
    """(label, QuantizedTensor) that every dequantize must refuse with a ValueError."""
    g = torch.Generator().manual_seed(3)
    cases = []
    for fmt, code in (("mxfp4", 0x1F), ("nvfp4", 0x10), ("mxfp6_e2m3", 0x40), ("mxfp6_e3m2", 0xFF)):
        q = hf.quantize(torch.randn(2, 64, generator=g), fmt, global_scale=None if fmt != "nvfp4" else 50.0)
        codes = q.codes.clone()
        codes[1, 7] = code
        cases.append((f"{fmt} code 0x{code:02X}", hf.QuantizedTensor(codes, q.scales, q.global_scale, fmt)))
    qn = hf.quantize(torch.randn(2, 32, generator=g), "nvfp4", global_scale=100.0)
    meta = torch.device("meta")
    for label, gs in (("gs 0", torch.tensor(0.0)), ("gs 0.0", 0.0), ("gs -1", torch.tensor([[1.0], [-1.0]])),
                      ("gs nan", float("nan")), ("gs inf", torch.tensor(float("inf"))), ("gs str", "2.0"),
                      ("gs list", [1.0, 2.0]), ("gs tuple", (1.0,)), ("gs bool", True),
                      ("gs bool tensor", torch.tensor(True)), ("gs complex", torch.tensor(1 + 0j)),
                      ("gs shape (3,)", torch.ones(3)), ("gs shape (2, 2)", torch.ones(2, 2)),
                      ("gs shape (1, 2)", torch.ones(1, 2)), ("gs shape (2, 1, 3)", torch.ones(2, 1, 3)),
                      ("gs on meta", torch.ones((), device=meta))):
        cases.append((label, hf.QuantizedTensor(qn.codes, qn.scales, gs, "nvfp4")))
    cases.append(("scales on meta", hf.QuantizedTensor(qn.codes, qn.scales.to(meta), qn.global_scale, "nvfp4")))
    cases.append(("codes on meta", hf.QuantizedTensor(qn.codes.to(meta), qn.scales, qn.global_scale, "nvfp4")))
    qm = hf.quantize(torch.randn(2, 64, generator=g), "mxfp4")
    cases.append(("mx with a global scale", hf.QuantizedTensor(qm.codes, qm.scales, torch.tensor(2.0), "mxfp4")))
    cases.append(("scales shape", hf.QuantizedTensor(qm.codes, qm.scales[:, :1], None, "mxfp4")))
    cases.append(("K not a multiple of the block", hf.QuantizedTensor(qm.codes[:, :33], qm.scales[:, :1], None, "mxfp4")))
    return cases


@pytest.mark.parametrize("label,q", _bad_dequantize_inputs(), ids=[c[0] for c in _bad_dequantize_inputs()])
def test_dequantize_bad_input_same_on_reference_and_kernels(label, q):
    """Bad input gives one ValueError with the same message on the reference
    and the kernels (validation lives in harness.formats.validate), never an
    IndexError, -inf or garbage on one path and something else on another."""
    ref = _outcome(lambda: hf.dequantize(q))
    assert ref[0] == "ValueError", f"{label}: reference gave {ref}"
    for backend in ("triton", "torch"):
        assert _outcome(lambda: hk.dequantize(q, backend=backend)) == ref, f"{label} backend={backend}"


@pytest.mark.parametrize("label,gs", [("0", 0.0), ("str", "2.0"), ("list", [1.0]), ("shape", torch.ones(3)),
                                      ("0 in float32", 1e-50), ("inf in float32", 1e300),
                                      ("meta", torch.ones((), device="meta")), ("bool", True)])
def test_quantize_bad_global_scale_same_on_reference_and_kernels(label, gs):
    x = torch.randn(2, 32)
    ref = _outcome(lambda: hf.quantize(x, "nvfp4", global_scale=gs))
    assert ref[0] == "ValueError", f"{label}: reference gave {ref}"
    for backend in ("triton", "torch"):
        for f in (hk.qdq, hk.quantize, hk.quantize_packed):
            assert _outcome(lambda: f(x, "nvfp4", global_scale=gs, backend=backend)) == ref, f"{label} {f.__name__}"
        assert _outcome(lambda: hf.qdq(x, "nvfp4", global_scale=gs)) == ref


def test_dequantize_weights_refuses_the_same_bad_input():
    """The stored-weights entry point: out-of-range codes, mixed devices and
    bad global scales give ValueErrors too."""
    q = hf.quantize(torch.randn(2, 4, 32), "mxfp6_e3m2")
    codes = q.codes.clone()
    codes[0, 0, 0] = 0x40
    with pytest.raises(ValueError, match="element code 0x40 in stored weights is out of range"):
        hk.dequantize_weights(codes, q.scales, None, "mxfp6_e3m2", backend="triton")
    with pytest.raises(ValueError, match="stored on cpu, scales on meta"):
        hk.dequantize_weights(q.codes, q.scales.to("meta"), None, "mxfp6_e3m2", backend="triton")
    qn = hf.quantize(torch.randn(2, 4, 32), "nvfp4")
    for gs, match in ((torch.tensor([1.0, 0.0]), "finite and > 0"), ("1", "real number"),
                      (torch.ones(2, device="meta"), "is on meta but the data is on cpu")):
        with pytest.raises(ValueError, match=match):
            hk.dequantize_weights(qn.codes, qn.scales, gs, "nvfp4", backend="triton")


def test_without_value_reads_reference_and_kernels_give_the_same_bits(monkeypatch):
    """Where values cannot be read (device tensors on hot paths, CUDA graph
    capture), bad values are not refused, so reference and kernel must give
    the same bits: codes read as their low `width` bits, a zero global scale
    dividing to +-Inf / NaN. Simulated on CPU by turning value reads off."""
    import harness.formats.validate as validate

    monkeypatch.setattr(validate, "values_readable", lambda t, read_values=None: bool(read_values))  # as on a GPU
    g = torch.Generator().manual_seed(4)
    for fmt in ("mxfp4", "nvfp4", "mxfp6_e2m3", "mxfp6_e3m2"):
        spec = hf.FORMATS[fmt]
        q = hf.quantize(torch.randn(2, 64, generator=g), fmt, global_scale=None if spec.is_mx else 40.0)
        codes = q.codes | torch.randint(0, 256, q.codes.shape, generator=g, dtype=torch.uint8)  # high bits set
        bad = hf.QuantizedTensor(codes, q.scales, None if spec.is_mx else torch.tensor([[0.0], [40.0]]), fmt)
        ref = hf.dequantize(bad)
        assert_bitwise_equal(hk.dequantize(bad, backend="triton"), ref, fmt)
        masked = hf.QuantizedTensor(codes & ((1 << spec.element.width) - 1), q.scales, bad.global_scale, fmt)
        assert_bitwise_equal(ref, hf.dequantize(masked), f"{fmt}: only the low bits are read")
        if not spec.is_mx:
            assert torch.isinf(ref[0]).any() and not torch.isinf(ref[1]).any()
        with pytest.raises(ValueError, match="out of range"):  # the explicit check still reads
            hf.check_codes(codes, fmt)


def test_value_checks_read_no_device_tensor():
    """Capture safety: the shared checks read no value of a non-CPU tensor
    (meta stands in for CUDA here: reading one would raise) and do no host
    work at all (harness/testing/checks/host_work.no_host_work raises on any tensor read)."""
    from harness.testing.checks.host_work import HostWorkInForward, no_host_work

    q = hf.quantize(torch.randn(2, 32), "nvfp4", global_scale=10.0)
    meta = torch.device("meta")
    bad_codes = torch.full((2, 32), 0xFF, dtype=torch.uint8, device=meta)
    scales, zero = q.scales.to(meta), torch.zeros((), device=meta)
    want = hf.dequantize(q)  # (fills the decode-table caches outside the block)
    with no_host_work():
        hf.dequantize_inputs(bad_codes, scales, zero, "nvfp4")
        got = hf.dequantize_without_value_checks(q)  # the MoE forward's path
        assert torch.equal(got, want)
        with pytest.raises(HostWorkInForward):  # a CPU tensor is read by default
            hf.dequantize_inputs(q.codes, q.scales, q.global_scale, "nvfp4")


def test_qdq_bf16_operand_is_the_ops():
    kernel_properties.bf16_operand_is_the_ops("cpu")


def test_qdq_bf16_operand_refuses_what_it_cannot_write():
    """bf16_operand puts a two-level row's one global scale back: a missing
    scale or one scale per row is a ValueError naming it, on every path; so
    is a dispatcher key that is not a block format."""
    import harness.moe.quantize_input as qi
    from harness.moe import ops as moe_ops

    x = torch.randn(4, 32)
    for backend in ("torch", "triton"):
        with pytest.raises(ValueError, match=r"bf16_operand .*nvfp4 needs one scalar global_scale, got \(4, 1\)"):
            hk.qdq(x, "nvfp4", global_scale=torch.full((4, 1), 3.0), backend=backend, bf16_operand=True)
        with pytest.raises(ValueError, match="bf16_operand .*nvfp4 needs one scalar global_scale, got None"):
            hk.qdq(x, "nvfp4", backend=backend, bf16_operand=True)
    with pytest.raises(ValueError, match=r"bf16_operand .*nvfp4 needs one scalar global scale, got \(4, 1\)"):
        moe_ops.qdq(x, "nvfp4", global_scale=torch.full((4, 1), 3.0), backend="torch", bf16_operand=True)
    for key in ("fp8", None):
        with pytest.raises(ValueError, match=f"bf16_operand writes a block format's QDQ .*{key!r} is"):
            qi.moe_kernel_quantize_input(x, None, key, bf16_operand=True)
    y, _ = qi.moe_kernel_quantize_input(x, torch.tensor(5.0), "nvfp4", bf16_operand=True)
    assert_bitwise_equal(y, (hf.qdq(x, "nvfp4", global_scale=torch.tensor(5.0)) * 5.0).to(torch.bfloat16))
    y, _ = qi.moe_kernel_quantize_input(x, None, "mxfp4", bf16_operand=True)
    assert_bitwise_equal(y, hf.qdq(x, "mxfp4", "even").to(torch.bfloat16))
