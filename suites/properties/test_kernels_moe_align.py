"""The one-launch and the chunked pair layouts (harness/kernels/moe_align.py)
are sort_pairs' layout bit for bit: rows (pair ids, -1 padding) and
block_expert."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.kernels import moe_align, pair_layout

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


def _check(ids, E, bm, device="cpu", build=moe_align.align_pairs):
    ids = ids.to(device)
    want = pair_layout.sort_pairs(ids, E, bm)
    got = build(ids, E, bm)
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


@pytest.mark.parametrize("device", DEVICES)
def test_align_experts_that_share_byte_bits(device):
    """The rank compares experts as bytes of words: experts equal but for the
    top bit (3 / 131), 0 / 255 / 127 / 128, long runs across word edges."""
    g = torch.Generator().manual_seed(9)
    pool = torch.tensor([3, 131, 0, 255, 127, 128])
    for P in (5, 64, 127, 128):
        _check(pool[torch.randint(0, len(pool), (P,), generator=g)], 256, 16, device)
    _check(torch.tensor([131] * 7 + [3] * 9 + [131] * 50), 256, 16, device)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), E=st.integers(1, moe_align.MAX_EXPERTS), bm=st.sampled_from(pair_layout.BLOCK_MS))
def test_chunked_equals_sort_pairs(data, E, bm):
    """Any pair count: whole and partial chunks, one expert's run across chunk edges."""
    P = data.draw(st.integers(1, 5 * moe_align.CHUNK))
    hot = data.draw(st.integers(1, E))
    ids = data.draw(st.lists(st.integers(0, hot - 1), min_size=P, max_size=P))
    perm = torch.randperm(E, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 2**31))))
    _check(perm[torch.tensor(ids)], E, bm, build=moe_align.align_pairs_chunked)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("P,E,bm", [(1, 1, 16), (128, 128, 16), (129, 4, 16), (256, 256, 128), (1000, 1, 64),
                                     # more chunks than the start program takes a step (START_ROWS), partial last
                                     (moe_align.CHUNK * moe_align.START_ROWS + 77, 60, 128),
                                     (moe_align.CHUNK * 2 * moe_align.START_ROWS, 256, 32)])
def test_chunked_edges(P, E, bm, device):
    g = torch.Generator().manual_seed(P * 1000 + E)
    _check(torch.randint(0, E, (P,), generator=g), E, bm, device, moe_align.align_pairs_chunked)
    _check(torch.full((P,), E - 1), E, bm, device, moe_align.align_pairs_chunked)  # every pair on the last expert
    # runs longer than a chunk, experts in decreasing order (each expert's pairs in several chunks)
    ids = torch.arange(P) * E // P
    _check(E - 1 - ids, E, bm, device, moe_align.align_pairs_chunked)


def test_pair_layout_picks_its_builder_by_size(monkeypatch):
    """Up to MAX_PAIRS pairs the one program, past it the chunked kernels,
    past MAX_EXPERTS experts the torch ops; each the same layout."""
    used = []
    for name in ("align_pairs", "align_pairs_chunked"):
        real = getattr(moe_align, name)
        monkeypatch.setattr(moe_align, name, lambda *a, _r=real, _n=name: used.append(_n) or _r(*a))
    g = torch.Generator().manual_seed(1)
    for P, E, want in ((moe_align.MAX_PAIRS, 4, "align_pairs"), (moe_align.MAX_PAIRS + 1, 4, "align_pairs_chunked"),
                       (moe_align.MAX_PAIRS + 1, moe_align.MAX_EXPERTS + 1, None)):
        used.clear()
        ids = torch.randint(0, E, (P,), generator=g)
        rows, be, bm = pair_layout.pair_layout(ids, E)
        ref = pair_layout.sort_pairs(ids, E, bm)
        assert torch.equal(rows, ref[0]) and torch.equal(be, ref[1])
        assert used == ([want] if want else []), (P, E, used)
    ids = torch.zeros(moe_align.MAX_PAIRS + 1, dtype=torch.int64)
    with pytest.raises(ValueError, match="outside the one-program kernel"):
        moe_align.align_pairs(ids, 4, 16)
    with pytest.raises(ValueError, match="outside the chunked kernels"):
        moe_align.align_pairs_chunked(ids, moe_align.MAX_EXPERTS + 1, 16)


def _assert_complete(ids, E, rows, block_expert, bm):
    """Every pair exactly once, in a block of its own expert, experts in
    order; blocks past the last used one are unused (-1) and all padding."""
    P = ids.shape[0]
    assert rows.shape[0] == block_expert.shape[0] * bm == moe_align.num_blocks(P, E, bm) * bm
    real = rows[rows >= 0]
    assert torch.equal(real.sort().values, torch.arange(P)), (ids.tolist(), E, bm)
    per_block = rows.reshape(-1, bm)
    for b, e in enumerate(block_expert.tolist()):
        got = per_block[b][per_block[b] >= 0]
        if e < 0:
            assert got.numel() == 0, (b, ids.tolist())
        else:
            assert got.numel() > 0 and bool((ids[got] == e).all()), (b, e, ids.tolist())
    used = block_expert[block_expert >= 0]
    assert bool((used[1:] >= used[:-1]).all())


@settings(max_examples=40, deadline=None)
@given(data=st.data(), E=st.integers(1, 300), bm=st.sampled_from(pair_layout.BLOCK_MS))
def test_layout_places_every_pair_once_within_its_bound(data, E, bm):
    """The fixed block count m + floor((P - m) / bm), m = min(P, E), holds
    every layout and is reached: the worst cases give m experts one pair
    past a multiple of bm each."""
    P = data.draw(st.integers(1, 3 * moe_align.MAX_PAIRS))
    if data.draw(st.booleans()):  # worst case: every used expert one pair past a multiple of bm
        n = min(P, E)
        counts = [1] * n
        left = P - n
        for i in range(left // bm):  # whole blocks round-robin: counts stay 1 past a multiple of bm
            counts[i % n] += bm
        counts[0] += left % bm
        ids = torch.repeat_interleave(torch.arange(n), torch.tensor(counts))
        ids = ids[torch.randperm(P, generator=torch.Generator().manual_seed(P))]
        worst = True
    else:
        ids = torch.tensor(data.draw(st.lists(st.integers(0, E - 1), min_size=P, max_size=P)))
        worst = False
    # the bound on paper first: a layout past it would write past the buffers
    needed = int(((torch.bincount(ids, minlength=E) + bm - 1) // bm).sum())
    assert needed <= moe_align.num_blocks(P, E, bm) and (needed == moe_align.num_blocks(P, E, bm) or not worst)
    rows, block_expert, _ = pair_layout.pair_layout(ids, E, block_m=bm)
    _assert_complete(ids, E, rows, block_expert, bm)


def test_decode_grid_is_a_few_blocks_not_one_per_expert():
    """Qwen3 at T=1 (8 pairs over 128 experts): 8 blocks of 16 rows, not 129."""
    rows, block_expert, bm = pair_layout.pair_layout(torch.arange(8) * 16, 128)
    assert (bm, block_expert.shape[0]) == (16, 8)
    _assert_complete(torch.arange(8) * 16, 128, rows, block_expert, bm)

