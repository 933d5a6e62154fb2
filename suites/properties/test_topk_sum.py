"""The top-k sum (harness.moe.combine): each token's k products added in
slot order from +0.0 in float32, then rounded once to the output dtype --
vLLM's moe_sum order. The fused backend's one-pass kernel is held to it on
the GPU (test_moe_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.moe import combine


def test_slot_order_decides_where_order_matters():
    """1 + 2^24 rounds back to 2^24 (a tie, to even), so slot order gives 0
    where adding the last two slots first would give 1; -0 alone sums to +0
    (the sum starts from +0.0)."""
    hw = torch.tensor([[[1.0], [2.0 ** 24], [-(2.0 ** 24)]]])
    assert combine.topk_sum(hw, torch.float32).item() == 0.0
    assert combine.topk_sum(hw.flip(1), torch.float32).item() == 1.0
    z = combine.topk_sum(torch.tensor([[[-0.0]]]), torch.float32)
    assert z.item() == 0.0 and not torch.signbit(z).item()


@settings(max_examples=30, deadline=None)
@given(T=st.integers(0, 5), k=st.integers(1, 8), H=st.integers(1, 40), seed=st.integers(0, 2 ** 31 - 1),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
def test_topk_sum_is_the_float32_running_sum(T, k, H, seed, dtype):
    """Against a float32 running sum written with numpy, element by element,
    over a wide exponent range (so reordering would show), cast once."""
    g = torch.Generator().manual_seed(seed)
    hw = torch.randn(T, k, H, generator=g) * torch.exp2(torch.randint(-30, 30, (T, k, H), generator=g).float())
    acc = np.zeros((T, H), dtype=np.float32)
    a = hw.numpy()
    for j in range(k):
        acc = (acc + a[:, j]).astype(np.float32)
    want = torch.from_numpy(acc).to(dtype)
    got = combine.topk_sum(hw, dtype)
    assert got.dtype == dtype and torch.equal(got, want)


def test_topk_sum_refuses_what_it_does_not_sum():
    with pytest.raises(ValueError, match=r"\[T, k, H\] float32"):
        combine.topk_sum(torch.zeros(2, 3), torch.float32)
    with pytest.raises(ValueError, match=r"\[T, k, H\] float32"):
        combine.topk_sum(torch.zeros(2, 3, 4, dtype=torch.float64), torch.float32)
