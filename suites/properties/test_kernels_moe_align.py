"""The one-launch pair layout (harness/kernels/moe_align.py) is sort_pairs'
layout bit for bit: rows (pair ids, -1 padding) and block_expert."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.kernels import moe_align, pair_layout

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


def _check(ids, E, bm, device="cpu"):
    ids = ids.to(device)
    want = pair_layout.sort_pairs(ids, E, bm)
    got = moe_align.align_pairs(ids, E, bm)
    assert torch.equal(got[0], want[0]), (ids.tolist(), E, bm)
    assert torch.equal(got[1], want[1]), (ids.tolist(), E, bm)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), E=st.integers(1, moe_align.MAX_EXPERTS), bm=st.sampled_from(pair_layout.BLOCK_MS))
def test_align_equals_sort_pairs(data, E, bm):
    P = data.draw(st.integers(1, moe_align.MAX_PAIRS))
    hot = data.draw(st.integers(1, E))  # few distinct experts -> long runs, stability matters
    ids = data.draw(st.lists(st.integers(0, hot - 1), min_size=P, max_size=P))
    perm = torch.randperm(E, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 2**31))))
    _check(perm[torch.tensor(ids)], E, bm)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("P,E,bm", [(1, 1, 16), (1, 128, 16), (128, 1, 16), (128, 128, 16), (128, 8, 128),
                                     (16, 256, 16), (33, 5, 32)])
def test_align_edges(P, E, bm, device):
    g = torch.Generator().manual_seed(P * 1000 + E)
    _check(torch.randint(0, E, (P,), generator=g), E, bm, device)
    _check(torch.full((P,), E - 1), E, bm, device)  # every pair on the last expert


def test_pair_layout_takes_the_torch_ops_past_the_kernel_limit():
    ids = torch.randint(0, 4, (moe_align.MAX_PAIRS + 1,), generator=torch.Generator().manual_seed(1))
    rows, be, bm = pair_layout.pair_layout(ids, 4)
    want = pair_layout.sort_pairs(ids, 4, bm)
    assert torch.equal(rows, want[0]) and torch.equal(be, want[1])
    with pytest.raises(ValueError, match="outside the one-program kernel"):
        moe_align.align_pairs(ids, 4, bm)
