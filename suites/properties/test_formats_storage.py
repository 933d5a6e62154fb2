"""Storage dtypes of codes and scales (harness/formats/storage.py): every
format x accepted storage dtype is read bit for bit by every consumer
(reference dequantize and its hot-path variant, block multipliers, the QDQ
error bound, the Triton kernels on the interpreter, the MoE loaders and
weight paths); every other dtype is refused with a ValueError naming the
dtype, the format and what is accepted.

The oracle for float8 storage is torch's own reading of that dtype: a scale
stored as float8_e8m0fnu means scales.float() (2^(b-127)), one stored as
float8_e4m3fn means its E4M3 value, fp8 codes stored as float8 mean their
value. Reading such a tensor by value instead of by its bits (an E8M0 scale
0.5 read as byte 0: -1.17e-38 where -1.0 is right) fails every case here.
"""
from __future__ import annotations

import pytest
import torch

import harness.formats as hf
import harness.kernels as hk
from harness.formats.bounds import check_qdq_bound
from harness.moe import conversion, loaders
from harness.moe import ops as moe_ops
from harness.kernels.fused_gemm import fused_dequantize
from harness.kernels.fused_weights import FusedWeights
from harness.testing.checks.bitwise import assert_bitwise_equal

U8 = torch.uint8
E4M3FN = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
E8M0 = getattr(torch, "float8_e8m0fnu", None)
F8_ALL = tuple(d for d in (E4M3FN, E5M2, E8M0, getattr(torch, "float8_e4m3fnuz", None),
                           getattr(torch, "float8_e5m2fnuz", None)) if d is not None)

# The documented table (storage.py), written out so a shrunken accepted list fails.
SCALE_STORAGE = {f: (U8, E4M3FN) if f == "nvfp4" else (U8, E8M0) for f in hf.FORMAT_NAMES}
CODE_STORAGE = {f: (U8,) for f in hf.FORMAT_NAMES}
CODE_STORAGE.update({"mxfp8_e4m3": (U8, E4M3FN), "mxfp8_e5m2": (U8, E5M2)})

needs_e8m0 = pytest.mark.skipif(E8M0 is None, reason="this torch has no float8_e8m0fnu")


def _combos():
    for fmt in hf.FORMAT_NAMES:
        for cd in CODE_STORAGE[fmt]:
            for sd in SCALE_STORAGE[fmt]:
                marks = [needs_e8m0] if sd is None else []
                yield pytest.param(fmt, cd, sd, id=f"{fmt}-{str(cd)[6:]}-{str(sd)[6:]}", marks=marks)


COMBOS = list(_combos())


def _bytes(fmt: str, seed: int = 0):
    """uint8 codes [16, 16*B] covering every code and scales [16, 16] holding
    every byte 0..255 once (E8M0 NaN 0xFF, E4M3 NaN and negative scales
    included); nvfp4 global scale one per row [16, 1]."""
    spec = hf.FORMATS[fmt]
    g = torch.Generator().manual_seed(seed)
    n = 16 * 16 * spec.block_size
    codes = (torch.arange(n) % (1 << spec.element.width))[torch.randperm(n, generator=g)].to(U8).reshape(16, -1)
    scales = torch.randperm(256, generator=g).to(U8).reshape(16, 16)
    gs = None if spec.is_mx else torch.rand(16, 1, generator=g) * 1000 + 0.5
    return codes, scales, gs


def _as(t: torch.Tensor, dtype) -> torch.Tensor:
    return t if dtype == U8 else t.view(dtype)


def _oracle(fmt, codes_s, scales_s, gs) -> torch.Tensor:
    """Values by torch's own reading of each storage dtype."""
    spec = hf.FORMATS[fmt]
    if codes_s.dtype == U8:
        table = torch.tensor([hf.decode_value(spec.element, c) for c in range(1 << spec.element.width)])
        vals = table[codes_s.long()]
    else:
        vals = codes_s.to(torch.float32)
    if scales_s.dtype == U8:
        mult = (hf.e8m0_to_float(scales_s) if spec.is_mx else hf.minifloat.decode(hf.E4M3, scales_s))
    else:
        mult = scales_s.to(torch.float32)
    if not spec.is_mx:
        mult = mult / gs
    B = spec.block_size
    return (vals.reshape(*vals.shape[:-1], -1, B) * mult.unsqueeze(-1)).reshape(vals.shape)


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
def test_accepted_storage_dtypes_are_the_documented_ones(fmt):
    assert hf.scale_dtypes(fmt) == tuple(d for d in SCALE_STORAGE[fmt] if d is not None)
    assert hf.code_dtypes(fmt) == CODE_STORAGE[fmt]


@needs_e8m0
def test_issue_11_repro():
    q = hf.quantize(torch.randn(4, 64, generator=torch.Generator().manual_seed(0)), "mxfp4")
    want = hf.dequantize(q)
    got = hf.dequantize(hf.QuantizedTensor(q.codes, q.scales.view(E8M0), None, "mxfp4"))
    assert_bitwise_equal(got, want, "mxfp4 with float8_e8m0fnu scales")
    assert_bitwise_equal(hk.dequantize(hf.QuantizedTensor(q.codes, q.scales.view(E8M0), None, "mxfp4"),
                                       backend="triton"), want, "kernel")
    qn = hf.quantize(torch.randn(4, 64), "nvfp4", global_scale=300.0)
    got = hf.dequantize(hf.QuantizedTensor(qn.codes, qn.scales.view(E4M3FN), qn.global_scale, "nvfp4"))
    assert_bitwise_equal(got, hf.dequantize(qn), "nvfp4 with float8_e4m3fn scales")


@pytest.mark.parametrize("fmt,cd,sd", COMBOS)
def test_reference_reads_storage_bit_for_bit(fmt, cd, sd):
    codes, scales, gs = _bytes(fmt)
    cs, ss = _as(codes, cd), _as(scales, sd)
    want = _oracle(fmt, cs, ss, gs)
    q = hf.QuantizedTensor(cs, ss, gs, fmt)
    # Fields are uint8 views of the same memory (no copy, no conversion).
    assert q.codes.dtype == U8 and q.scales.dtype == U8
    assert q.codes.data_ptr() == cs.data_ptr() and q.scales.data_ptr() == ss.data_ptr()
    assert_bitwise_equal(hf.dequantize(q), want, f"dequantize {fmt} {cd} {sd}")
    assert_bitwise_equal(hf.dequantize_without_value_checks(q), want, "hot-path dequantize")
    # A storage tensor assigned after construction is read the same way.
    q_late = hf.QuantizedTensor(codes, scales, gs, fmt)
    q_late.codes, q_late.scales = cs, ss
    assert_bitwise_equal(hf.dequantize(q_late, torch.bfloat16), want.to(torch.bfloat16), "assigned later")
    assert_bitwise_equal(hf.block_scale_values(q_late), hf.block_scale_values(hf.QuantizedTensor(codes, scales, gs, fmt)))


@pytest.mark.parametrize("fmt,cd,sd", COMBOS)
def test_qdq_error_bound_and_moe_weight_paths_read_storage(fmt, cd, sd):
    """The QDQ error bound (bounds.py reads q.scales itself), the MoE weight
    dequantization (hot path) and the fused kernel's weight format, fed a
    quantizer's output stored as float8: identical to the uint8 original."""
    spec = hf.FORMATS[fmt]
    x = torch.randn(3, 4, 2 * spec.block_size, generator=torch.Generator().manual_seed(1))
    gs = None if spec.is_mx else hf.nvfp4_global_scale(x.abs().amax(dim=(1, 2))).reshape(3, 1)
    q = hf.quantize(x, fmt, global_scale=gs)
    qs = hf.QuantizedTensor(_as(q.codes, cd), _as(q.scales, sd), q.global_scale, fmt)
    ratio, bad = check_qdq_bound(x, qs)
    ratio_u8, bad_u8 = check_qdq_bound(x, q)
    assert ratio == ratio_u8 <= 1.0 and torch.equal(bad, bad_u8)
    g = None if gs is None else gs.reshape(-1)
    assert_bitwise_equal(moe_ops.dequantize_expert_weights(qs, g, backend="torch"), hf.dequantize(q))
    fw, fw_u8 = FusedWeights.from_quantized(qs, g), FusedWeights.from_quantized(q, g)
    assert torch.equal(fw.data, fw_u8.data) and torch.equal(fw.scales, fw_u8.scales)
    assert fw.scales.dtype == torch.uint8 and (fw.gscale is None) == (g is None)
    assert_bitwise_equal(fused_dequantize(fw), hf.dequantize(q))


@pytest.mark.parametrize("fmt,cd,sd", COMBOS)
def test_kernels_read_storage_bit_for_bit(fmt, cd, sd):
    """Triton (interpreter) dequantize and dequantize_weights, with storage
    dtypes reaching the kernel entry points directly."""
    spec = hf.FORMATS[fmt]
    codes, scales, gs = _bytes(fmt)
    cs, ss = _as(codes, cd), _as(scales, sd)
    want = _oracle(fmt, cs, ss, gs)
    q = hf.QuantizedTensor(codes, scales, gs, fmt)
    q.codes, q.scales = cs, ss  # bypass the constructor: the kernel API must view them itself
    assert_bitwise_equal(hk.dequantize(q, backend="triton"), want, f"hk.dequantize {fmt} {cd} {sd}")
    E = 2
    w_codes, w_scales = codes.reshape(E, 8, -1), scales.reshape(E, 8, -1)
    g = None if spec.is_mx else gs.reshape(E, 8)[:, 0].contiguous()
    want_w = hf.dequantize(hf.QuantizedTensor(w_codes, w_scales, None if g is None else g.reshape(E, 1), fmt))
    stored = [_as(w_codes, cd)] + ([hf.pack_fp4(w_codes)] if spec.is_fp4 else [])
    for s in stored:
        got = hk.dequantize_weights(s, _as(w_scales, sd), g, fmt, torch.float32, backend="triton")
        assert_bitwise_equal(got, want_w, f"dequantize_weights {fmt} stored {s.dtype}{tuple(s.shape)} scales {sd}")


# ---------------------------------------------------------------- MoE loaders

_MX_SCHEMES = {"mxfp4": "w_mxfp4_a_mxfp4", "mxfp6_e3m2": "w_mxfp6_e3m2_a_mxfp6_e3m2",
               "mxfp6_e2m3": "w_mxfp6_e2m3_a_mxfp6_e2m3", "mxfp8_e4m3": "w_mxfp8"}


def _expert_weights(fmt, seed=2):
    """Quantized w13 [E, 2I, H], w2 [E, H, I] of a tiny layer."""
    spec = hf.FORMATS[fmt]
    g = torch.Generator().manual_seed(seed)
    E, H, I = 2, 2 * spec.block_size, spec.block_size
    out = []
    for shape in ((E, 2 * I, H), (E, H, I)):
        w = torch.randn(*shape, generator=g)
        gs = None if spec.is_mx else hf.nvfp4_global_scale(w.abs().amax(dim=(1, 2)))
        mode = "floor" if not spec.is_mx else "even"
        out.append((hf.quantize(w, fmt, scale_mode=mode, global_scale=None if gs is None else gs.reshape(E, 1)), gs))
    return out


def _stored(q, spec, cd):
    return hf.pack_fp4(q.codes) if spec.is_fp4 else _as(q.codes, cd)


def _mx_loader_cases():
    for fmt, scheme in _MX_SCHEMES.items():
        for cd in CODE_STORAGE[fmt]:
            yield pytest.param(fmt, scheme, cd, id=f"{scheme}-{str(cd)[6:]}", marks=[needs_e8m0])


@pytest.mark.parametrize("fmt,scheme,cd", list(_mx_loader_cases()))
def test_ocp_mx_loader_reads_storage(fmt, scheme, cd):
    spec = hf.FORMATS[fmt]
    (q13, _), (q2, _) = _expert_weights(fmt)
    for sd in SCALE_STORAGE[fmt]:
        cfg = loaders.load_ocp_mx({"w13_weight": _stored(q13, spec, cd), "w13_weight_scale": _as(q13.scales, sd),
                                   "w2_weight": _stored(q2, spec, cd), "w2_weight_scale": _as(q2.scales, sd)},
                                  scheme=scheme)
        for got, want in ((cfg.w13_q, q13), (cfg.w2_q, q2)):
            assert torch.equal(got.codes, want.codes) and torch.equal(got.scales, want.scales), f"{scheme} {cd} {sd}"
            assert_bitwise_equal(moe_ops.dequantize_expert_weights(got, None, backend="torch"), hf.dequantize(want))


@pytest.mark.parametrize("convention", ("modelopt", "compressed_tensors"))
def test_nvfp4_loaders_read_storage(convention):
    (q13, g13), (q2, g2) = _expert_weights("nvfp4")
    results = []
    for sd in SCALE_STORAGE["nvfp4"]:
        t = {"w13_weight_scale": _as(q13.scales, sd), "w2_weight_scale": _as(q2.scales, sd)}
        if convention == "modelopt":
            t.update(w13_weight=hf.pack_fp4(q13.codes), w2_weight=hf.pack_fp4(q2.codes),
                     w13_weight_scale_2=1.0 / g13, w2_weight_scale_2=1.0 / g2)
            cfg = loaders.load_modelopt_nvfp4(t)
        else:
            t.update(w13_weight_packed=hf.pack_fp4(q13.codes), w2_weight_packed=hf.pack_fp4(q2.codes),
                     w13_weight_global_scale=g13, w2_weight_global_scale=g2)
            cfg = loaders.load_compressed_tensors_nvfp4(t)
        for got, want in ((cfg.w13_q, q13), (cfg.w2_q, q2)):
            assert torch.equal(got.codes, want.codes) and torch.equal(got.scales, want.scales), f"{convention} {sd}"
        results.append(moe_ops.dequantize_expert_weights(cfg.w13_q, cfg.w13_gscale, backend="torch"))
    assert_bitwise_equal(results[1], results[0], f"{convention}: float8_e4m3fn vs uint8 scales")
    if convention == "compressed_tensors":  # encode-side scales stored exactly: the original weights
        assert_bitwise_equal(results[0], hf.dequantize(q13))


# ---------------------------------------------------------------- refused dtypes

def _refused_scale_dtypes(fmt):
    wrong_f8 = [d for d in F8_ALL if d not in SCALE_STORAGE[fmt]]
    return [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.bool] + wrong_f8


def _refused_code_dtypes(fmt):
    wrong_f8 = [d for d in F8_ALL if d not in CODE_STORAGE[fmt]]
    return [torch.float32, torch.int8, torch.int16, torch.bool] + wrong_f8


def _retype(t: torch.Tensor, dtype) -> torch.Tensor:
    return t.view(dtype) if torch.empty((), dtype=dtype).element_size() == 1 else t.to(dtype)


def _refused(fmt, dtypes):
    return [pytest.param(fmt, d, id=f"{fmt}-{str(d)[6:]}") for d in dtypes]


@pytest.mark.parametrize("fmt,dtype", [p for f in hf.FORMAT_NAMES for p in _refused(f, _refused_scale_dtypes(f))])
def test_refused_scale_dtypes(fmt, dtype):
    spec = hf.FORMATS[fmt]
    codes, scales, gs = _bytes(fmt)
    bad = _retype(scales, dtype)
    msg = rf"{fmt}: .*dtype {dtype} is not accepted; .*stored as torch\.uint8, "
    with pytest.raises(ValueError, match=msg):
        hf.QuantizedTensor(codes, bad, gs, fmt)
    q = hf.QuantizedTensor(codes, scales, gs, fmt)
    q.scales = bad
    for call in (hf.dequantize, hf.dequantize_without_value_checks, hf.block_scale_values,
                 lambda q: hk.dequantize(q, backend="triton"), lambda q: hk.dequantize(q, backend="torch")):
        with pytest.raises(ValueError, match=msg):
            call(q)
    w, s = codes.reshape(2, 8, -1), bad.reshape(2, 8, -1)
    g = None if spec.is_mx else torch.ones(2)
    with pytest.raises(ValueError, match=msg):
        hk.dequantize_weights(w, s, g, fmt, backend="triton")
    if fmt in _MX_SCHEMES:
        with pytest.raises(ValueError, match=rf"{fmt}: w13_weight_scale dtype {dtype}"):
            conversion.convert_to_ocp_mx_moe_kernel_format(None, w, s, w, s, "unfused", scheme=_MX_SCHEMES[fmt])
    if fmt == "nvfp4":
        with pytest.raises(ValueError, match=rf"nvfp4: w13_weight_scale dtype {dtype}"):
            loaders.load_compressed_tensors_nvfp4({"w13_weight_packed": hf.pack_fp4(w), "w13_weight_scale": s,
                                                   "w2_weight_packed": hf.pack_fp4(w), "w2_weight_scale": s,
                                                   "w13_weight_global_scale": torch.ones(2),
                                                   "w2_weight_global_scale": torch.ones(2)})


@pytest.mark.parametrize("fmt,dtype", [p for f in hf.FORMAT_NAMES for p in _refused(f, _refused_code_dtypes(f))])
def test_refused_code_dtypes(fmt, dtype):
    spec = hf.FORMATS[fmt]
    codes, scales, gs = _bytes(fmt)
    bad = _retype(codes, dtype)
    msg = rf"{fmt}: .*dtype {dtype} is not accepted; {spec.element.name} element codes are stored as torch\.uint8"
    with pytest.raises(ValueError, match=msg):
        hf.QuantizedTensor(bad, scales, gs, fmt)
    q = hf.QuantizedTensor(codes, scales, gs, fmt)
    q.codes = bad
    for call in (hf.dequantize, lambda q: hk.dequantize(q, backend="triton")):
        with pytest.raises(ValueError, match=msg):
            call(q)
    with pytest.raises(ValueError, match=msg):
        hk.dequantize_weights(bad.reshape(2, 8, -1), scales.reshape(2, 8, -1), None if spec.is_mx else torch.ones(2),
                              fmt, backend="triton")
    if fmt in _MX_SCHEMES:
        w, s = bad.reshape(2, 8, -1), scales.reshape(2, 8, -1)
        with pytest.raises(ValueError, match=rf"{fmt}: w13_weight dtype {dtype}"):
            conversion.convert_to_ocp_mx_moe_kernel_format(None, w, s, w, s, "unfused", scheme=_MX_SCHEMES[fmt])


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2"])
def test_loaders_refuse_out_of_range_codes(fmt):
    """One code per byte wider than the element: refused at load time (the
    forward then reads no values)."""
    codes, scales, _ = _bytes(fmt)
    w, s = codes.reshape(2, 8, -1).clone(), scales.reshape(2, 8, -1)
    w[1, 3, 5] = 1 << hf.FORMATS[fmt].element.width
    with pytest.raises(ValueError, match=rf"{fmt}: element code 0x{int(w[1, 3, 5]):02X} in w13_weight is out of range"):
        conversion.convert_to_ocp_mx_moe_kernel_format(None, w, s, codes.reshape(2, 8, -1), s, "unfused",
                                                       scheme=_MX_SCHEMES.get(fmt, "w_mxfp4_a_mxfp4"))
