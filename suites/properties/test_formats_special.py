"""Every special-value rule of docs/numerics.md, as explicit cases."""
import math

import pytest
import torch

import harness.formats as hf
from harness.formats.scales import e4m3_decode

from harness.testing.checks.bitwise import assert_bitwise_equal

MX = hf.MX_FORMAT_NAMES
F32_MAX = torch.finfo(torch.float32).max


def _block(fmt, values, fill=0.0):
    B = hf.FORMATS[fmt].block_size
    x = torch.full((B,), fill, dtype=torch.float32)
    x[: len(values)] = torch.tensor(values, dtype=torch.float32)
    return x


def prevfloat(v: float) -> float:
    return float(torch.nextafter(torch.tensor(v, dtype=torch.float32), torch.tensor(-math.inf)))


# FP4 tie tables (docs/numerics.md). Anchor 6.0 puts the mxfp4 floor scale at 2^0;
# for nvfp4 gs=1 and amax 6 give s = e4m3(1.0) = 1 and r = 1.
RNE_TIES = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0}
AWAY_TIES = {0.25: 0.5, 0.75: 1.0, 1.25: 1.5, 1.75: 2.0, 2.5: 3.0, 3.5: 4.0, 5.0: 6.0}


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("rounding,table", [("rne", RNE_TIES), ("away", AWAY_TIES)], ids=["rne", "away"])
def test_fp4_tie_tables(fmt, rounding, table):
    ties = list(table)
    x = _block(fmt, [6.0] + ties + [-t for t in ties])
    y = hf.qdq(x, fmt, rounding=rounding)
    n = len(ties)
    assert y[1 : 1 + n].tolist() == [table[t] for t in ties]
    assert y[1 + n : 1 + 2 * n].tolist() == [-table[t] for t in ties]


@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("mode", hf.SCALE_MODES)
def test_all_zero_block_gets_byte_zero(fmt, mode):
    q = hf.quantize(_block(fmt, [-0.0, 0.0]), fmt, mode)
    assert q.scales.tolist() == [0]
    assert q.codes[0] == hf.FORMATS[fmt].element.sign_bit and int(q.codes[1:].max()) == 0


@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_gives_nan_scale_and_nan_block(fmt, bad):
    x = torch.cat([_block(fmt, [1.0, bad]), _block(fmt, [1.0])])
    q = hf.quantize(x, fmt)
    assert q.scales.tolist() == [0xFF, 127 - hf.FORMATS[fmt].emax]
    y = hf.dequantize(q)
    B = hf.FORMATS[fmt].block_size
    assert bool(torch.isnan(y[:B]).all()) and bool(torch.isfinite(y[B:]).all())


@pytest.mark.parametrize("fmt", MX)
def test_scale_byte_clamped_to_0_254(fmt):
    tiny = hf.quantize(_block(fmt, [2.0**-140]), fmt, "floor")
    assert tiny.scales.tolist() == [0]
    for mode in hf.SCALE_MODES:
        huge = hf.quantize(_block(fmt, [F32_MAX]), fmt, mode)
        assert 0 < int(huge.scales[0]) <= 254, mode


@pytest.mark.parametrize("fmt", MX)
def test_near_fp32_max_floor_finite_ceil_overflows(fmt):
    """floor stays finite at fp32 max; ceil/rceil scales, clamped at 2^127, give
    an element that dequantizes to +-Inf (torchao's behaviour, docs/numerics.md)."""
    x = _block(fmt, [F32_MAX, -F32_MAX, 1.0])
    assert bool(torch.isfinite(hf.qdq(x, fmt, "floor")).all())
    for mode in ("ceil", "rceil"):
        y = hf.qdq(x, fmt, mode)
        assert y[0] == math.inf and y[1] == -math.inf, (mode, y[:3])


@pytest.mark.parametrize("fmt", MX)
def test_floor_uses_exponent_bits_not_float32_log2(fmt):
    """prevfloat(8.0): float32 log2 rounds to 3.0; the true floor is 2."""
    assert float(torch.log2(torch.tensor(prevfloat(8.0)))) == 3.0  # the pitfall is real here
    q = hf.quantize(_block(fmt, [prevfloat(8.0)]), fmt, "floor")
    assert int(q.scales[0]) == 127 + 2 - hf.FORMATS[fmt].emax


@pytest.mark.parametrize("fmt,threshold", [("mxfp4", 1.75), ("mxfp6_e2m3", 1.9375), ("mxfp6_e3m2", 1.875)])
@pytest.mark.parametrize("n", [-3, 0, 5])
def test_even_mode_increments_at_mantissa_threshold(fmt, threshold, n):
    floor_byte = 127 + n - hf.FORMATS[fmt].emax
    at = hf.quantize(_block(fmt, [math.ldexp(threshold, n)]), fmt, "even")
    below = hf.quantize(_block(fmt, [math.ldexp(prevfloat(threshold), n)]), fmt, "even")
    assert int(at.scales[0]) == floor_byte + 1 and int(below.scales[0]) == floor_byte


def test_element_rounding_is_exact_near_half_of_smallest_code():
    """x/step = prevfloat(0.5) must round to 0, not to the smallest code
    (microxcaling's float32 floor(x + 0.5) does the latter)."""
    x = _block("mxfp4", [6.0, prevfloat(0.25)])
    for rounding in hf.ROUNDINGS:
        assert hf.quantize(x, "mxfp4", rounding=rounding).codes[1] == 0


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
def test_signed_zero_kept(fmt):
    """-0.0 and negatives that round to zero keep the sign bit (torchao)."""
    spec = hf.FORMATS[fmt]
    # With amax 4 the MX scale is 2^(2-emax) (nvfp4, gs 1: s = e4m3(4/6) ~ 0.6875);
    # an eighth of the smallest code step at that scale rounds to zero.
    block_scale = 2.0 ** (2 - spec.emax) if spec.is_mx else 0.6875
    tiny = spec.min_subnormal * block_scale / 8
    q = hf.quantize(_block(fmt, [4.0, -0.0, -tiny, 0.0]), fmt)
    sign = hf.FORMATS[fmt].element.sign_bit
    assert q.codes[1:4].tolist() == [sign, sign, 0]
    y = hf.dequantize(q)
    assert math.copysign(1, y[1]) == -1 and math.copysign(1, y[2]) == -1


def test_nvfp4_inf_saturates_and_nan_poisons():
    x = torch.cat([_block("nvfp4", [math.inf, -math.inf, 1.0]), _block("nvfp4", [math.nan, 1.0])])
    q = hf.quantize(x, "nvfp4")
    assert e4m3_decode(q.scales).tolist()[0] == 448.0
    assert q.codes[:2].tolist() == [7, 15]
    assert bool(torch.isnan(hf.dequantize(q)[16:]).all())


def test_nvfp4_global_scale_none_means_one():
    x = torch.randn(4, 64)
    assert_bitwise_equal(hf.qdq(x, "nvfp4"), hf.qdq(x, "nvfp4", global_scale=1.0), "None vs 1.0")


def test_nvfp4_operation_order():
    """Dequantization is e2m1 * fl(s/gs), the ratio first (vLLM's Triton order);
    (e2m1*s)/gs differs for some inputs when gs is not a power of two."""
    gs = 2688.0 / 3.7
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(1)) * 3
    q = hf.quantize(x, "nvfp4", global_scale=gs)
    y = hf.dequantize(q)
    e = hf.decode_lut(q.spec.element)[q.codes.long()]
    s = e4m3_decode(q.scales).unsqueeze(-1)
    gs32 = torch.tensor(gs, dtype=torch.float32)
    ratio_first = (e.reshape(256, 1, 16) * (s / gs32)).reshape(256, 16)
    product_first = ((e.reshape(256, 1, 16) * s) / gs32).reshape(256, 16)
    assert torch.equal(y, ratio_first)
    assert not torch.equal(y, product_first), "order should matter for a non-power-of-two gs"


@pytest.mark.parametrize("gs", [1.0, 2688.0 / 97.0, 0.37, 1234.5])
def test_nvfp4_block_scale_formula(gs):
    """s = e4m3_rne(clamp(gs * (amax * fl(1/6)), 448)), float32 ops in that order.
    amax is taken within +-64 float32 ulps of every e4m3 tie point
    (tie * 6 / gs), where a different order ((gs*amax)/6, exact division)
    rounds the other way for a few dozen of the 16k values."""
    e4m3 = hf.decode_lut(hf.E4M3)[:127].double()
    ties = (e4m3[1:] + e4m3[:-1]) / 2
    g = torch.tensor(gs, dtype=torch.float32)
    k = torch.arange(-64, 65, dtype=torch.float64)
    amax = ((ties * 6 / float(g)).unsqueeze(1) * (1 + k * 2.0**-24)).float().flatten()
    amax = amax[(amax > 0) & torch.isfinite(amax)]
    x = torch.zeros(amax.numel(), 16)
    x[:, 3] = -amax
    q = hf.quantize(x, "nvfp4", global_scale=gs)
    sixth = torch.tensor(1 / 6, dtype=torch.float32)
    want = torch.clamp(g * (amax * sixth), max=448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(q.scales[:, 0], want)
    other_order = torch.clamp((g * amax) / 6, max=448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    assert not torch.equal(other_order, want), "inputs no longer reach the near-tie cases"


def test_global_scale_conventions_round_trip():
    amax = torch.tensor([0.5, 3.0, 1234.5])
    gs = hf.nvfp4_global_scale(amax)
    assert torch.allclose(gs * amax, torch.full_like(amax, 2688.0), rtol=2**-22)
    modelopt = hf.global_scale_to_modelopt(gs)  # decode side, small
    assert bool((modelopt < 1).all() == (gs > 1).all())
    assert torch.allclose(hf.global_scale_from_modelopt(modelopt), gs, rtol=2**-22)
    assert torch.equal(hf.global_scale_from_compressed_tensors(gs), gs)
    assert hf.nvfp4_global_scale(torch.tensor(0.0)) == 1.0
