"""The reference against three independent implementations, for finite inputs:
torchao (called directly: MX, rne, all four scale modes), microxcaling's
algorithm (floor mode, 'even' and 'nearest' rounding) and vLLM's NVFP4
emulation (see oracles.py for what each oracle is and where they differ)."""
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import harness.formats as hf
import harness.strategies as hs

from suites.properties import oracles
from harness.testing.checks.bitwise import assert_bitwise_equal

torchao = pytest.importorskip("torchao", reason="torchao is a test dependency (pyproject [test])")

MX = hf.MX_FORMAT_NAMES


@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("mode", hf.SCALE_MODES)
@given(data=st.data())
def test_matches_torchao_bitwise(fmt, mode, data):
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32, torch.bfloat16)))
    if mode == "even":
        # torchao EVEN gives a NaN scale when amax rounds past 2^127 (docs/numerics.md);
        # the reference clamps to 254. Outside that corner they must agree.
        assume(bool((oracles.amax_exponent(case.x, 32) < 127).all()))
    if mode == "rceil":
        # torchao's eager RCEIL takes ceil(float32 log2(amax / max_normal)); log2
        # rounds to an integer just above a power of two (see the test below).
        assume(not bool(oracles.rceil_log2_rounds_down(case.x, fmt).any()))
    ao_scales, ao_codes = oracles.torchao_codes(case.x, fmt, mode)
    q = hf.quantize(case.x, fmt, mode, "rne")
    assert torch.equal(q.scales, ao_scales), f"scales {q.scales.tolist()} vs torchao {ao_scales.tolist()}"
    # torchao divides by 2^-126 in blocks whose byte is 0 (see the test below);
    # compare element codes everywhere else.
    B = hf.FORMATS[fmt].block_size
    ok = (q.scales != 0).repeat_interleave(B, -1)
    assert torch.equal(q.codes[ok], ao_codes[ok]), f"codes differ at {torch.nonzero((q.codes != ao_codes) & ok)[:5].tolist()}"


@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("rounding,mx_round", [("rne", "even"), ("away", "nearest")])
@given(data=st.data())
def test_matches_microxcaling_algorithm(fmt, rounding, mx_round, data):
    case = data.draw(hs.block_tensors(fmt, dtypes=(torch.float32,)))
    ours = hf.qdq(case.x, fmt, "floor", rounding)
    theirs = oracles.microxcaling_qdq(case.x, fmt, mx_round)
    # microxcaling drops the sign of zero: compare values (-0.0 == 0.0).
    assert torch.equal(ours, theirs), f"differs at {torch.nonzero(ours != theirs)[:5].tolist()}"


@given(data=st.data())
def test_matches_vllm_nvfp4_emulation(data):
    case = data.draw(hs.block_tensors("nvfp4", dtypes=(torch.float32, torch.bfloat16)))
    gs = data.draw(hs.global_scales())
    ours = hf.qdq(case.x.to(torch.float32), "nvfp4", global_scale=gs)
    theirs = oracles.vllm_nvfp4_qdq(case.x, gs)
    assert torch.equal(ours, theirs), f"differs at {torch.nonzero(ours != theirs)[:5].tolist()}"


def test_oracles_can_see_a_difference():
    """The oracles are not vacuous: away vs even and the two nvfp4 orders differ."""
    x = torch.zeros(32)
    x[0], x[1] = 6.0, 2.5
    assert oracles.microxcaling_qdq(x, "mxfp4", "even")[1] == 2.0
    assert oracles.microxcaling_qdq(x, "mxfp4", "nearest")[1] == 3.0
    assert_bitwise_equal(oracles.vllm_nvfp4_qdq(x[:16], None), hf.qdq(x[:16], "nvfp4"), "nvfp4")


def test_torchao_divergence_in_byte_zero_blocks():
    """Found while building this check (torchao 0.18): for a block whose E8M0
    byte is 0 (amax < 2^(emax-127)), torchao quantizes elements against 2^-126
    but its own dequantization reads byte 0 as 2^-127, so its round trip halves
    the block. The reference uses 2^-127 on both sides (OCP: byte b = 2^(b-127))."""
    x = torch.zeros(1, 32)
    x[0, 0] = 2.0**-127  # exactly representable: code 1.0 at scale 2^-127
    q = hf.quantize(x, "mxfp4")
    assert int(q.scales[0, 0]) == 0 and hf.dequantize(q)[0, 0] == 2.0**-127
    _, ao_codes = oracles.torchao_codes(x, "mxfp4", "floor")
    assert int(ao_codes[0, 0]) == 1  # torchao: 0.5 x 2^-127, half the input


def test_torchao_rceil_float32_log2_divergence():
    """torchao 0.18's eager RCEIL computes ceil(log2(descale)) in float32; for
    descale = fl(96 + 1 ulp) / 6 = 16 + 1 ulp, float32 log2 returns exactly 4.0, so it picks
    2^4 and the element saturates. The reference takes the smallest n with
    amax <= max_normal * 2^n (what the cvt.rp.ue8m0 instruction it cites does
    on the float32 quotient): 2^5."""
    x = torch.full((1, 32), 6.0 * (1 + 2.0**-23), dtype=torch.float32) * 16  # 96 + 1 ulp
    assert bool(oracles.rceil_log2_rounds_down(x, "mxfp4").all())
    ao_scales, _ = oracles.torchao_codes(x, "mxfp4", "rceil")
    assert int(ao_scales[0, 0]) == 127 + 4
    assert int(hf.quantize(x, "mxfp4", "rceil").scales[0, 0]) == 127 + 5
