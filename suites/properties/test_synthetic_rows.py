"""The one-row promise: a format is one row of harness.formats.FORMATS.

Synthetic rows (never public) are added to the table for the duration of a
test and every suite kind runs on them: the reference's property checks, the
Triton kernels against the reference bit for bit (the interpreter, CPU), and
the MoE layer against the float64 reference. Rows:

  mxfp4_b16   MX rule, E2M1 elements, blocks of 16 (not the OCP 32)
  mxint8      MX rule, OCP MX v1.0 MXINT8 elements (two's complement, 2^-6)
  nvfp6_e2m3  two-level rule (fp32 global scale + E4M3 block scale), E2M3
              elements: every constant of the rule comes from the row
              (element max 7.5, fl32(1/7.5), scale max 448)

The kernels do not implement integer elements; that they refuse mxint8 with a
clear error is itself checked.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.formats as hf
import harness.kernels as hk
import harness.moe.schemes as schemes
from harness.commands.run import formats as format_checks
from harness.formats.spec import E2M1, E2M3, INT8, FormatSpec
from harness.kernels import constants as kernel_constants
from harness.strategies import MoEProblem
from harness.testing.checks.bitwise import assert_bitwise_equal
from harness.testing.checks.oracle import check_fused_matches_unfused, check_matches_reference
from suites.properties import kernel_properties, qdq_properties

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = {
    "mxfp4_b16": FormatSpec("mxfp4_b16", E2M1, 16, "e8m0", "float4_e2m1fn", sqnr_floor_db=13.0),
    "mxint8": FormatSpec("mxint8", INT8, 32, "e8m0", None, sqnr_floor_db=30.0),
    "nvfp6_e2m3": FormatSpec("nvfp6_e2m3", E2M3, 16, "e4m3", "float6_e2m3fn", has_global_scale=True,
                             sqnr_floor_db=13.0),
}
KERNEL_ROWS = ("mxfp4_b16", "nvfp6_e2m3")  # the kernels implement minifloat elements only
SCHEMES = {
    "w_mxfp4_b16_a_mxfp4_b16": schemes.Scheme("w_mxfp4_b16_a_mxfp4_b16", "mxfp4_b16", "mxfp4_b16", "mxfp4_b16"),
    "w_mxint8_a_mxint8": schemes.Scheme("w_mxint8_a_mxint8", "mxint8", "mxint8", "mxint8"),
    "w_nvfp6_e2m3_a_nvfp6_e2m3": schemes.Scheme("w_nvfp6_e2m3_a_nvfp6_e2m3", "nvfp6_e2m3", "nvfp6_e2m3",
                                                "nvfp6_e2m3", scale_mode="floor", needs_act_gscale=True),
}
BUDGET = settings(max_examples=8, deadline=None)


@pytest.fixture
def synthetic(monkeypatch):
    """The synthetic rows and schemes in the tables; monkeypatch restores them,
    and the kernel-constant cache (keyed by format name) is emptied around."""
    kernel_constants.kernel_constants.cache_clear()
    for name, row in ROWS.items():
        monkeypatch.setitem(hf.FORMATS, name, row)
    for name, row in SCHEMES.items():
        monkeypatch.setitem(schemes.SCHEMES, name, row)
    yield
    kernel_constants.kernel_constants.cache_clear()


def _small(prop):
    """A shared property body (fmt, data) as a hypothesis test at this module's
    small budget."""
    return BUDGET(given(data=st.data())(prop))


# --------------------------------------------------------------------- a worked example
# nvfp6_e2m3, x = [7.5, 7.0, 6.0, 1.0] (+ 12 zeros: one block of 16), global scale 1.
# By the row's rule: amax = 7.5; fl32(1/7.5) = 0.13333334028720856; 7.5 * that =
# 1.0000000521540642, which rounds to 1.0 in float32 (below 1 + 2^-24); gs * 1.0 = 1.0;
# clamp to +-448 leaves it; E4M3 RNE of 1.0 is exact: exponent field 7 (bias 7),
# mantissa 0 -> scale byte 0x38. r = fl(gs / s) = 1, elements x * 1 clamped to +-7.5
# (E2M3's max): all four are E2M3 values. E2M3 = 1 sign, 2 exponent (bias 1),
# 3 mantissa bits: 7.5 = 1.875 * 2^2 -> field 3, mantissa 7 -> 0x1F; 7.0 = 1.75 * 2^2
# -> 0x1E; 6.0 = 1.5 * 2^2 -> 0x1C; 1.0 = 1.0 * 2^0 -> field 1, mantissa 0 -> 0x08.
# Dequantized: code * fl(s / gs) = the input exactly.
# NVFP4's hard-coded constants instead give s = e4m3(7.5 * fl(1/6)) = 1.25 and
# elements e2m3(x * 0.8) = [6, 5.5, 5, 0.75] -> [7.5, 6.875, 6.25, 0.9375].
NVFP6_X = [7.5, 7.0, 6.0, 1.0]
NVFP6_CODES = [0x1F, 0x1E, 0x1C, 0x08]
NVFP6_SCALE = 0x38


def _nvfp6_input():
    x = torch.zeros(1, 16)
    x[0, :4] = torch.tensor(NVFP6_X)
    return x


def test_two_level_rule_reads_the_row_hand_computed(synthetic):
    x = _nvfp6_input()
    for backend in ("reference", "triton"):
        if backend == "reference":
            q = hf.quantize(x, "nvfp6_e2m3", global_scale=1.0)
            y = hf.qdq(x, "nvfp6_e2m3", global_scale=1.0)
        else:
            q = hk.quantize(x, "nvfp6_e2m3", global_scale=1.0, backend="triton")
            y = hk.qdq(x, "nvfp6_e2m3", global_scale=1.0, backend="triton")
        assert q.codes[0, :4].tolist() == NVFP6_CODES, f"{backend}: codes {q.codes[0, :4].tolist()}"
        assert q.scales.tolist() == [[NVFP6_SCALE]], f"{backend}: scale byte {q.scales.tolist()}"
        assert y[0, :4].tolist() == NVFP6_X, f"{backend}: qdq gave {y[0, :4].tolist()}"
        assert hf.dequantize(q)[0, :4].tolist() == NVFP6_X


def test_derived_constants_come_from_the_row():
    nv6 = ROWS["nvfp6_e2m3"]
    assert (nv6.elem_max, nv6.scale_max, nv6.gs_numerator) == (7.5, 448.0, 3360.0)
    assert nv6.inv_elem_max == 0.13333334028720856  # fl32(1/7.5)
    nv4 = hf.FORMATS["nvfp4"]
    assert (nv4.inv_elem_max, nv4.gs_numerator) == (0.1666666716337204, 2688.0)  # fl32(1/6), 448*6
    assert hf.NVFP4_GS_NUMERATOR == 2688.0
    consts = kernel_constants.kernel_constants.__wrapped__  # uncached: the row, not the table, is read
    assert consts("nvfp4")["INV_ELEM_MAX"] == nv4.inv_elem_max
    assert consts(nv6)["INV_ELEM_MAX"] == nv6.inv_elem_max


# --------------------------------------------------------------------- reference properties
def test_format_run_checks_pass(synthetic):
    """The seeded checks of `moe-harness run` (bound, idempotence, NaN rule,
    SQNR floor from the row) on every mode and rounding of the synthetic rows."""
    seen = set()
    for rec in format_checks.iter_checks():
        name = rec["name"].split("/")[0]
        if name in ROWS:
            seen.add(name)
            assert rec["passed"], rec
            assert rec["details"]["sqnr_floor_db"] == ROWS[name].sqnr_floor_db
    assert seen == set(ROWS)


@pytest.mark.parametrize("fmt", list(ROWS))
def test_reference_properties(synthetic, fmt):
    _small(qdq_properties.error_within_half_a_code_step)(fmt=fmt)
    _small(qdq_properties.monotone_within_a_block)(fmt=fmt)
    _small(qdq_properties.nan_or_inf_poisons_only_its_block)(fmt=fmt)
    if not ROWS[fmt].element.is_int:  # an integer element has no -0: qdq(-x) is +0 where -qdq(x) is -0
        _small(qdq_properties.sign_symmetry)(fmt=fmt)
    if ROWS[fmt].is_mx:
        _small(qdq_properties.mx_qdq_is_idempotent)(fmt=fmt)
        _small(qdq_properties.scale_mode_relations)(fmt=fmt)


def test_integer_element_codec():
    """MXINT8 elements: code = two's complement k, value k * 2^-6; saturation is
    symmetric at +-127/64 (0x80 = -2 decodes but is never produced); no -0 and
    no NaN code (the E8M0 NaN scale carries a NaN block)."""
    from harness.formats import minifloat

    vals = [minifloat.decode_value(INT8, c) for c in range(256)]
    assert vals[0x01] == 1 / 64 and vals[0x7F] == 127 / 64 and vals[0x80] == -2.0 and vals[0xFF] == -1 / 64
    codes = torch.arange(256, dtype=torch.uint8)
    back = minifloat.encode(INT8, minifloat.decode(INT8, codes))
    want = codes.clone()
    want[0x80] = 0x81  # -2 saturates to -127/64
    assert torch.equal(back, want)
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 3.0, -0.0, 300.0, -300.0, float("nan")]) / 64
    assert minifloat.encode(INT8, x, "rne").tolist() == [0, 2, 2, 0, 0xFE, 3, 0, 0x7F, 0x81, 0]
    assert minifloat.encode(INT8, x, "away").tolist() == [1, 2, 3, 0xFF, 0xFE, 3, 0, 0x7F, 0x81, 0]
    assert (INT8.emax, INT8.max_normal, INT8.min_normal) == (0, 127 / 64, 1 / 64)


# --------------------------------------------------------------------- kernels == reference
@pytest.mark.parametrize("fmt", KERNEL_ROWS)
def test_kernels_match_reference(synthetic, fmt):
    _small(kernel_properties.kernels_match_reference)(fmt=fmt)
    _small(kernel_properties.dequantize_any_bytes)(fmt=fmt)
    kernel_properties.every_mode_rounding_dtype_on_corners(fmt)


def test_kernels_refuse_integer_elements(synthetic):
    x = torch.ones(1, 32)
    with pytest.raises(ValueError, match="int8: 'int' elements are not implemented in the Triton kernels"):
        hk.qdq(x, "mxint8", backend="triton")
    assert hk.qdq(x, "mxint8", backend="torch").tolist() == x.tolist()


# --------------------------------------------------------------------- MoE layer == reference
def _problem(scheme, **kw):
    base = dict(E=4, top_k=2, H=32, I=32, T=6, seed=3, logits="grid", spread=2)
    base.update(kw)
    return MoEProblem(scheme, **base)


@pytest.mark.parametrize("scheme,ckpt", [("w_nvfp6_e2m3_a_nvfp6_e2m3", "modelopt"),
                                         ("w_nvfp6_e2m3_a_nvfp6_e2m3", "compressed_tensors"),
                                         ("w_mxfp4_b16_a_mxfp4_b16", "native"),
                                         ("w_mxint8_a_mxint8", "native")])
def test_moe_layer_matches_reference(synthetic, scheme, ckpt):
    check_matches_reference(_problem(scheme, ckpt=ckpt))


@pytest.mark.parametrize("scheme,ckpt", [("w_nvfp6_e2m3_a_nvfp6_e2m3", "modelopt"),
                                         ("w_mxfp4_b16_a_mxfp4_b16", "native")])
def test_moe_fused_matches_unfused(synthetic, scheme, ckpt):
    check_fused_matches_unfused(_problem(scheme, ckpt=ckpt, T=3))


def test_moe_fused_refuses_integer_elements(synthetic):
    with pytest.raises(ValueError, match="integer elements are not implemented in the fused MoE GEMM"):
        check_fused_matches_unfused(_problem("w_mxint8_a_mxint8", T=3))


def test_two_level_moe_uses_the_rows_global_scale(synthetic):
    """Weights of a two-level scheme get gs = gs_numerator / amax of the row
    (3360 / amax for nvfp6_e2m3, not NVFP4's 2688)."""
    from harness.moe.layer import quantize_expert_weights

    w = torch.zeros(1, 1, 16)
    w[0, 0, :4] = torch.tensor(NVFP6_X)
    q, gs = quantize_expert_weights(w, "w_nvfp6_e2m3_a_nvfp6_e2m3")
    assert gs.tolist() == [3360.0 / 7.5]
    assert_bitwise_equal(hf.dequantize(q), w, "nvfp6_e2m3 weights at their own global scale")


# --------------------------------------------------------------------- the row refuses what is not implemented
@pytest.mark.parametrize("kw,match", [
    (dict(scale_kind="e8m0", has_global_scale=True), "E8M0 .MX. block scale with a global scale is not implemented"),
    (dict(scale_kind="e4m3", has_global_scale=False), "E4M3 block scale without a global scale is not implemented"),
    (dict(scale_kind="ue8m0"), "unknown scale kind 'ue8m0'"),
    (dict(block_size=24), "block size 24 must be a power of two"),
    (dict(element=INT8, scale_kind="e4m3", has_global_scale=True), "two-level row with an integer element"),
    (dict(sqnr_floor_db=None), "sqnr_floor_db"),
])
def test_row_refuses_unimplemented_combinations(kw, match):
    base = dict(name="bad", element=E2M1, block_size=32, scale_kind="e8m0", ml_dtypes_name=None, sqnr_floor_db=13.0)
    with pytest.raises(ValueError, match=match):
        FormatSpec(**{**base, **kw})


def test_synthetic_rows_leave_the_table_as_it_was():
    assert tuple(hf.FORMATS) == hf.FORMAT_NAMES
    assert not set(SCHEMES) & set(schemes.SCHEMES)
    assert dataclasses.replace(hf.FORMATS["mxfp4"]) == hf.FORMATS["mxfp4"]
