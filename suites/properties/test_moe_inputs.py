"""The layer's and the experts' inputs are checked before any kernel indexes by them.

An expert id outside [0, E) is no error to the GEMMs: the unfused backend's
dense loop matches no expert and drops the pair (a plausible, wrong output),
the fused pair layout places it past the last expert and its GEMM reads
weights that are not there (NaN or another tensor's bytes). Router logits of
another width than E route to such ids, or never to the last experts. So:

* FusedMoE.forward refuses hidden / router_logits whose shapes are not
  [T, H] / [T, E] of the layer (or not float, or on two devices), naming the
  tensor, its shape and the one expected;
* experts.apply refuses hidden, topk_weights and topk_ids of the wrong shape or
  dtype, and any id outside [0, E) (`torch._assert_async`: no host sync, so the
  no-host-work proxy of test_moe_structure still holds), on both backends;
* ids at the edges (0 and E - 1) compute, int16 / int32 ids giving the bits of the same ids as int64.

The CUDA side (a device-side assert in eager mode, no check while a graph is
captured) is exercised by test_moe_gpu.py.
"""
import pytest
import torch

from harness.moe.layer import build_emulated_moe
from harness.schemes import EXPERT_BACKENDS

pytestmark = pytest.mark.usefixtures("one_thread")

E, H, INTER, T, K = 4, 32, 32, 5, 2


@pytest.fixture(scope="module")
def layers():
    g = torch.Generator().manual_seed(0)
    w13 = torch.randn(E, 2 * INTER, H, generator=g) * H ** -0.5
    w2 = torch.randn(E, H, INTER, generator=g) * INTER ** -0.5
    x = torch.randn(T, H, generator=g)
    return {b: build_emulated_moe("w_mxfp4", w13, w2, top_k=K, backend=b) for b in EXPERT_BACKENDS}, x


@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
@pytest.mark.parametrize("what, hidden_shape, logits_shape, match", [
    ("logits one column wider", (T, H), (T, E + 1), r"router_logits .*\[T=5, E=4\].*\[5, 5\]"),
    ("logits one column narrower", (T, H), (T, E - 1), r"router_logits .*\[T=5, E=4\].*\[5, 3\]"),
    ("logits one row more", (T, H), (T + 1, E), r"router_logits .*\[T=5, E=4\].*\[6, 4\]"),
    ("logits 3-D", (T, H), (1, T, E), r"router_logits .*\[1, 5, 4\]"),
    ("hidden of another H", (T, H - 8), (T, E), r"hidden .*\[T, H=32\].*\[5, 24\]"),
    ("hidden 1-D", (H,), (T, E), r"hidden .*\[T, H=32\].*\[32\]"),
])
def test_forward_refuses_inputs_of_another_shape(layers, backend, what, hidden_shape, logits_shape, match):
    moe = layers[0][backend]
    with pytest.raises(ValueError, match=match):
        moe(torch.zeros(hidden_shape), torch.zeros(logits_shape))


@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
def test_forward_refuses_integer_logits(layers, backend):
    moe, x = layers[0][backend], layers[1]
    with pytest.raises(ValueError, match=r"router_logits must be a float tensor.*torch.int64"):
        moe(x, torch.zeros(T, E, dtype=torch.int64))


def _ids(bad_value, row, slot):
    ids = torch.tensor([[t % E, (t + 1) % E] for t in range(T)], dtype=torch.int64)
    ids[row, slot] = bad_value
    return ids


@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
@pytest.mark.parametrize("bad", [E, E + 100, -1, -E])
@pytest.mark.parametrize("row, slot", [(0, 0), (T - 1, K - 1), (2, 1)])
def test_apply_refuses_an_id_outside_the_experts(layers, backend, bad, row, slot):
    experts = layers[0][backend].experts
    with pytest.raises(RuntimeError, match=r"expert id outside \[0, 4\)"):
        experts.apply(layers[1], torch.full((T, K), 0.5), _ids(bad, row, slot))


@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_apply_takes_the_edge_ids(layers, backend, dtype):
    """Ids 0 and E - 1 in every slot: computed, and each token's output is that of the same ids as int64."""
    experts, x = layers[0][backend].experts, layers[1]
    w = torch.full((T, K), 0.5)
    ids = torch.tensor([[0, E - 1]] * T, dtype=dtype)
    out = experts.apply(x, w, ids)
    assert torch.equal(out, experts.apply(x, w, ids.to(torch.int64)))
    assert bool(torch.isfinite(out).all()) and bool((out != 0).any())


@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
@pytest.mark.parametrize("what, change, match", [
    ("ids of float dtype", lambda x, w, i: (x, w, i.to(torch.float32)), r"topk_ids must hold integer.*float32"),
    ("ids of bool dtype", lambda x, w, i: (x, w, i > 0), r"topk_ids must hold integer.*bool"),
    ("ids of another T", lambda x, w, i: (x, w[:-1], i[:-1]), r"topk_ids must be \[T=5, k\], got \[4, 2\]"),
    ("ids 1-D", lambda x, w, i: (x, w, i.reshape(-1)), r"topk_ids must be \[T=5, k\], got \[10\]"),
    ("weights of another k", lambda x, w, i: (x, w[:, :1], i), r"topk_weights .*\[5, 2\], got .*\[5, 1\]"),
    ("weights integer", lambda x, w, i: (x, i, i), r"topk_weights must be a float tensor"),
    ("hidden of another H", lambda x, w, i: (x[:, :-1], w, i), r"hidden .*\[T, H=32\].*\[5, 31\]"),
])
def test_apply_refuses_inputs_of_another_shape_or_dtype(layers, backend, what, change, match):
    experts = layers[0][backend].experts
    x, w, ids = change(layers[1], torch.full((T, K), 0.5), _ids(1, 0, 0))
    with pytest.raises(ValueError, match=match):
        experts.apply(x, w, ids)
