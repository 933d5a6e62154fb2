"""FP4 packing: low nibble = element 2i (docs/numerics.md)."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import harness.formats as hf


def test_torchao_nibble_order_example():
    q = hf.quantize(torch.tensor([0.0, 0.5, 4.0, -0.0] + [0.0] * 28), "mxfp4")
    assert q.codes[:4].tolist() == [0, 1, 6, 8]
    assert hf.pack_fp4(q.codes[:4]).tolist() == [0b00010000, 0b10000110]


@given(st.lists(st.integers(0, 15), min_size=1, max_size=64).map(lambda l: l + l[:1] if len(l) % 2 else l),
       st.integers(1, 3))
def test_pack_unpack_round_trip(codes, rows):
    c = torch.tensor(codes, dtype=torch.uint8).repeat(rows, 1)
    packed = hf.pack_fp4(c)
    assert packed.shape == (rows, len(codes) // 2)
    assert torch.equal(hf.unpack_fp4(packed), c)
    assert torch.equal(packed & 0xF, c[:, 0::2]) and torch.equal(packed >> 4, c[:, 1::2])


def test_pack_rejects_bad_input():
    with pytest.raises(ValueError, match="even"):
        hf.pack_fp4(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="4-bit"):
        hf.pack_fp4(torch.tensor([16, 0], dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        hf.pack_fp4(torch.zeros(2, dtype=torch.int32))
