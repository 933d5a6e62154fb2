"""QDQ properties of the reference, parametrized over the format table (the
bodies shared with test_synthetic_rows.py are in qdq_properties.py)."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import harness.formats as hf
import harness.strategies as hs
from harness.formats.scales import e4m3_decode
from harness.testing.checks.bitwise import assert_bitwise_equal
from suites.properties import qdq_properties

MX = hf.MX_FORMAT_NAMES


@pytest.mark.parametrize("fmt", MX)
@given(data=st.data())
def test_mx_qdq_is_idempotent(fmt, data):
    """Same mode, same rounding: qdq(qdq(x)) == qdq(x) bit for bit (float32 and
    bfloat16 hold every dequantized value exactly)."""
    qdq_properties.mx_qdq_is_idempotent(fmt, data)


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
    qdq_properties.error_within_half_a_code_step(fmt, data)


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
@given(data=st.data())
def test_sign_symmetry(fmt, data):
    qdq_properties.sign_symmetry(fmt, data)


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
@given(data=st.data())
def test_monotone_within_a_block(fmt, data):
    qdq_properties.monotone_within_a_block(fmt, data)


@pytest.mark.parametrize("fmt", MX)
@given(data=st.data())
def test_scale_mode_relations(fmt, data):
    """floor <= even <= floor + 1, floor <= rceil <= ceil <= floor + 1 (bytes,
    before the [0, 254] clamp can only tie them), and rceil/ceil never saturate."""
    qdq_properties.scale_mode_relations(fmt, data)


@pytest.mark.parametrize("fmt", hf.FORMAT_NAMES)
@given(data=st.data())
def test_nan_or_inf_poisons_only_its_block(fmt, data):
    qdq_properties.nan_or_inf_poisons_only_its_block(fmt, data)
