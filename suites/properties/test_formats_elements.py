"""Element codecs against ml_dtypes, used only where docs/numerics.md says it is a
valid oracle: decoding every code, and encoding finite in-range values with
round-to-nearest-even (not NaN, not overflow)."""
import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given

import harness.formats as hf
import harness.strategies as hs
from harness.formats import minifloat, scales

ELEMENTS = sorted({(f.element, f.ml_dtypes_name) for f in hf.FORMATS.values()}, key=lambda e: e[0].name)
IDS = [e.name for e, _ in ELEMENTS]


def _ml(name):
    return getattr(ml_dtypes, name)


def _ml_encode(values: np.ndarray, name: str) -> np.ndarray:
    return values.astype(np.float32).astype(_ml(name)).view(np.uint8)


@pytest.mark.parametrize("el,ml_name", ELEMENTS, ids=IDS)
def test_every_code_decodes_like_ml_dtypes(el, ml_name):
    codes = np.arange(1 << el.width, dtype=np.uint8)
    expected = codes.view(_ml(ml_name)).astype(np.float32)
    got = minifloat.decode(el, torch.from_numpy(codes)).numpy()
    np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(expected)], expected.view(np.uint32)[~np.isnan(expected)])
    assert np.array_equal(np.isnan(got), np.isnan(expected))


@pytest.mark.parametrize("el,ml_name", ELEMENTS, ids=IDS)
def test_all_bf16_values_in_range_encode_like_ml_dtypes(el, ml_name):
    """Exhaustive over the 65536 bf16 bit patterns: every finite |v| <= max_normal."""
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    v = bits.to(torch.float32)
    v = v[torch.isfinite(v) & (v.abs() <= el.max_normal)]
    got = minifloat.encode(el, v, "rne").numpy()
    want = _ml_encode(v.numpy(), ml_name)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{el.name}: {bad.size} mismatches, first {v[bad[:5]].tolist()} -> {got[bad[:5]]} vs {want[bad[:5]]}"


@pytest.mark.parametrize("el,ml_name", ELEMENTS, ids=IDS)
@given(v=hs.finite_float32())
def test_finite_float32_in_range_encodes_like_ml_dtypes(el, ml_name, v):
    if abs(v) > el.max_normal:
        v = v % el.max_normal  # fold into range: keeps a full-precision mantissa
    got = int(minifloat.encode(el, torch.tensor([v], dtype=torch.float32), "rne")[0])
    want = int(_ml_encode(np.array([v]), ml_name)[0])
    assert got == want, f"{el.name}: {v!r} -> {got:#x}, ml_dtypes {want:#x}"


def test_e8m0_bytes_decode_like_ml_dtypes():
    b = np.arange(256, dtype=np.uint8)
    want = b.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    got = scales.e8m0_to_float(torch.from_numpy(b)).numpy()
    assert np.array_equal(got, want, equal_nan=True)


def test_e4m3_scale_encode_matches_torch_saturating_cast():
    """torch's float8_e4m3fn cast is RNE and saturates (docs/numerics.md): a valid
    oracle for every finite float32 -- here every finite bf16 value."""
    v = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).to(torch.float32)
    v = v[torch.isfinite(v)]
    want = torch.clamp(v, -448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    got = scales.e4m3_encode(v)
    assert torch.equal(got, want)


@pytest.mark.parametrize("el,ml_name", ELEMENTS, ids=IDS)
def test_away_rounding_differs_from_rne_only_at_ties(el, ml_name):
    """Away and RNE agree off ties; at an exact midpoint away takes the larger magnitude."""
    # Filter before sorting: NaN compares false both ways and would scramble the order.
    vals = sorted({v for c in range(el.sign_bit) if np.isfinite(v := minifloat.decode_value(el, c))})
    mids = torch.tensor([(a + b) / 2 for a, b in zip(vals, vals[1:])], dtype=torch.float32)
    upper = torch.tensor(vals[1:], dtype=torch.float32)
    away = minifloat.decode(el, minifloat.encode(el, mids, "away"))
    assert torch.equal(away, upper)
    rne = minifloat.encode(el, mids, "rne")
    assert torch.equal(rne & 1, torch.zeros_like(rne)), "RNE must land on even codes at ties"
    off = mids * (1 - 2.0**-20)
    assert torch.equal(minifloat.encode(el, off, "away"), minifloat.encode(el, off, "rne"))
