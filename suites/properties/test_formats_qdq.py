"""QDQ properties of the reference, parametrized over the format table."""
import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

import harness.formats as hf
import harness.strategies as hs
from harness.formats.bounds import check_qdq_bound
from harness.formats.scales import e4m3_decode

from suites.checks.bitwise import assert_bitwise_equal

MX = hf.MX_FORMAT_NAMES


def _opts(fmt, mode, rounding, gs):
    """The drawn options that apply to the row (FormatSpec.scale_modes / has_global_scale)."""
    spec = hf.FORMATS[fmt]
    return dict(scale_mode=mode if mode in spec.scale_modes else spec.scale_modes[0], rounding=rounding,
                global_scale=gs if spec.has_global_scale else None)


@pytest.mark.parametrize("fmt", MX)
@given(data=st.data())
def test_mx_qdq_is_idempotent(fmt, data):
    """Same mode, same rounding: qdq(qdq(x)) == qdq(x) bit for bit (float32 and
    bfloat16 hold every dequantized value exactly)."""
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32, torch.bfloat16), allow_nan_inf=True))
    mode, rounding = data.draw(hs.scale_modes()), data.draw(hs.roundings())
    once = hf.qdq(case.x, fmt, mode, rounding)
    assert_bitwise_equal(hf.qdq(once, fmt, mode, rounding), once, f"{fmt}/{mode}/{rounding}")


@given(data=st.data())
def test_nvfp4_qdq_idempotent_on_blocks_holding_max_code(data):
    """NVFP4 is not idempotent in general (the block scale is recomputed from the
    quantized values). What holds: a block whose largest code is +-6 keeps its
    scale exactly (gs*(6*fl(s/gs))*fl(1/6) is within a few float32 ulps of the
    e4m3 value s, far from any e4m3 tie), so its elements come back unchanged;
    and no block scale ever grows."""
    case = data.draw(hs.block_tensors("nvfp4", dtypes=(torch.float32,)))
    gs = data.draw(hs.global_scales())
    q1 = hf.quantize(case.x, "nvfp4", global_scale=gs)
    x1 = hf.dequantize(q1)
    q2 = hf.quantize(x1, "nvfp4", global_scale=gs)
    s1, s2 = e4m3_decode(q1.scales), e4m3_decode(q2.scales)
    assert bool((s2 <= s1).all()), f"block scale grew: {s1} -> {s2}"
    holds_max = ((q1.codes & 7).reshape(*q1.scales.shape, 16) == 7).any(-1)
    assert torch.equal(s2[holds_max], s1[holds_max])
    x2 = hf.dequantize(q2).reshape(*q2.scales.shape, 16)
    assert_bitwise_equal(x2[holds_max], x1.reshape(*q1.scales.shape, 16)[holds_max], "nvfp4 max-code blocks")


def test_nvfp4_qdq_is_not_idempotent_in_general():
    # gs 1, block max 0.0059: s = e4m3(0.0059/6 = 0.000983) rounds UP to the
    # subnormal 2^-9, so the max lands on code 3.0 (not 6) -> 0.005859375.
    # Re-quantizing: 0.005859375/6 = 2^-10 exactly, an e4m3 tie that RNE sends
    # to 0, and the whole block vanishes. Subnormal block scales break it.
    x = torch.zeros(16)
    x[0] = 0.0059
    once = hf.qdq(x, "nvfp4")
    twice = hf.qdq(once, "nvfp4")
    assert once[0] == 0.005859375 and twice[0] == 0.0


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
@given(data=st.data())
def test_error_within_half_a_code_step(fmt, data):
    """|qdq(x) - x| <= half the code spacing of the block (formats/bounds.py),
    except saturated elements."""
    case = data.draw(hs.block_tensors(fmt))
    mode, rounding, gs = data.draw(hs.scale_modes()), data.draw(hs.roundings()), data.draw(hs.global_scales())
    q = hf.quantize(case.x, fmt, **_opts(fmt, mode, rounding, gs))
    worst, bad = check_qdq_bound(case.x, q)
    note(f"worst err/bound = {worst}")
    assert worst <= 1.0, f"{fmt}/{mode}/{rounding}: error {worst:.4g}x the bound at {torch.nonzero(bad)[:5].tolist()}"


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
@given(data=st.data())
def test_sign_symmetry(fmt, data):
    case = data.draw(hs.block_tensors(fmt, allow_nan_inf=True))
    mode, rounding, gs = data.draw(hs.scale_modes()), data.draw(hs.roundings()), data.draw(hs.global_scales())
    opts = _opts(fmt, mode, rounding, gs)
    assert_bitwise_equal(hf.qdq(-case.x, fmt, **opts), -hf.qdq(case.x, fmt, **opts), "qdq(-x) vs -qdq(x)")


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
@given(data=st.data())
def test_monotone_within_a_block(fmt, data):
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32,)))
    mode, rounding, gs = data.draw(hs.scale_modes()), data.draw(hs.roundings()), data.draw(hs.global_scales())
    B = hf.FORMATS[fmt].block_size
    xb = case.x.reshape(-1, B)
    yb = hf.qdq(case.x, fmt, **_opts(fmt, mode, rounding, gs)).reshape(-1, B)
    order = torch.argsort(xb, dim=-1, stable=True)
    ys = torch.gather(yb, -1, order)
    assert bool((ys[:, 1:] >= ys[:, :-1]).all()), f"not monotone: x sorted {torch.gather(xb, -1, order)} -> {ys}"


@pytest.mark.parametrize("fmt", MX)
@given(data=st.data())
def test_scale_mode_relations(fmt, data):
    """floor <= even <= floor + 1, floor <= rceil <= ceil <= floor + 1 (bytes,
    before the [0, 254] clamp can only tie them), and rceil/ceil never saturate."""
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32,)))
    b = {m: hf.quantize(case.x, fmt, m).scales.to(torch.int32) for m in hf.SCALE_MODES}
    assert bool((b["floor"] <= b["even"]).all() and (b["even"] <= b["floor"] + 1).all())
    assert bool((b["floor"] <= b["rceil"]).all() and (b["rceil"] <= b["ceil"]).all())
    assert bool((b["ceil"] <= b["floor"] + 1).all())
    spec = hf.FORMATS[fmt]
    for mode in ("ceil", "rceil"):
        q = hf.quantize(case.x, fmt, mode)
        v = case.x.reshape(*q.scales.shape, -1).abs() / hf.e8m0_to_float(q.scales).unsqueeze(-1)
        unclamped = q.scales.to(torch.int32) < 254
        assert bool((v[unclamped] <= spec.max_normal).all()), f"{mode} saturated an element"


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
@given(data=st.data())
def test_nan_or_inf_poisons_only_its_block(fmt, data):
    case = data.draw(hs.block_tensors(fmt, allow_nan_inf=True))
    gs = data.draw(hs.global_scales())
    q = hf.quantize(case.x, fmt, **_opts(fmt, "floor", "rne", gs))
    B = hf.FORMATS[fmt].block_size
    xb = case.x.reshape(*q.scales.shape, B)
    y = hf.dequantize(q).reshape(*q.scales.shape, B)
    if hf.FORMATS[fmt].is_mx:
        bad = ~torch.isfinite(xb).all(-1)
        assert torch.equal(q.scales == 0xFF, bad)
    else:
        bad = torch.isnan(xb).any(-1)  # NVFP4: Inf saturates (scale 448), NaN poisons
        assert bool((q.scales[bad] & 0x7F == 0x7F).all())
    assert bool(torch.isnan(y[bad]).all()), "a poisoned block must dequantize to NaN"
    assert bool(torch.isfinite(y[~bad]).all()), "floor-mode blocks without NaN/Inf stay finite"
