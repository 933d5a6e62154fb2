"""The routing's one-launch top-k (harness/kernels/topk.py) gives the indices
of a stable descending torch.sort, bit for bit: ties to the lower index,
-0.0 equal to +0.0, -Inf last, NaN above +Inf; with scores it writes the
chosen experts' weights as topk.weights_expression, bit for bit; and the
CUDA routing takes it."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.kernels import topk

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]
# Few distinct values (long runs of ties) and every special: what makes the order subtle.
# NaN of every sign and payload: the sort ranks all of them alike, above +Inf.
NANS = torch.tensor([0x7FC00000, 0x7F800001, -0x00400000, -1], dtype=torch.int32).view(torch.float32).tolist()
SPECIALS = [0.0, -0.0, float("inf"), -float("inf"), 1.0, -1.0, 1e-45, -1e-45, 3.4e38] + NANS


# decode and prefill rows of Qwen3 / DeepSeek-V3 / Mixtral-sized routers, the widest row, k = E and k = 1
EDGE_SHAPES = [(1, 128, 8), (16, 128, 8), (4096, 128, 4), (7, 256, 8), (3, 1024, 16), (5, 8, 8), (33, 16, 1)]


def _want(keys, k):
    return torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :k]


def _check(keys, k, device="cpu"):
    got = topk.topk_ids(keys.to(device), k).cpu()
    assert got.dtype == torch.int64 and got.is_contiguous()
    assert torch.equal(got, _want(keys, k)), (keys.tolist(), k)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), E=st.sampled_from([1, 2, 8, 16, 60, 128, 256, 384]), T=st.integers(1, 40))
def test_topk_is_the_stable_sort(data, E, T):
    k = data.draw(st.integers(1, min(E, 9)))
    pool = data.draw(st.lists(st.sampled_from(SPECIALS) | st.floats(width=32, allow_nan=False), min_size=1,
                              max_size=6))
    idx = torch.randint(0, len(pool), (T, E), generator=torch.Generator().manual_seed(data.draw(st.integers(0, 2**31))))
    _check(torch.tensor(pool, dtype=torch.float32)[idx], k)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,E,k", EDGE_SHAPES)
def test_topk_edges(T, E, k, device):
    g = torch.Generator().manual_seed(T * 7 + E)
    keys = torch.randn(T, E, generator=g)
    keys[0] = 0.0  # a row of ties
    keys[-1, ::2] = float("nan")
    keys[-1, 1::4] = NANS[2]  # a NaN with the sign bit set
    _check(keys, k, device)
    _check(torch.tensor(SPECIALS * (E // len(SPECIALS) + 1))[:E].expand(T, E).contiguous(), k, device)
    _check(keys.t().contiguous().t()[:, :E], k, device)  # keys not contiguous by row


def _check_route(keys, scores, k, renormalize, scale, device="cpu"):
    ids, w = topk.topk_route(keys.to(device), scores.to(device), k, renormalize, scale)
    want = _want(keys, k)
    assert torch.equal(ids.cpu(), want), (keys.tolist(), k)
    w_want = topk.weights_expression(scores, want, renormalize, scale)
    assert w.dtype == torch.float32 and w.shape == want.shape
    w = w.cpu()
    same = (w.view(torch.int32) == w_want.view(torch.int32)) | (w.isnan() & w_want.isnan())  # NaN payloads: the CPU's
    assert bool(same.all()), (w, w_want)


# scaling factors in use (DeepSeek-V3 2.5, Kimi-K2 2.827) and one not a float32
SCALES = [1.0, 2.5, 2.827, 1.0 / 3.0]


@settings(max_examples=30, deadline=None)
@given(data=st.data(), E=st.sampled_from([1, 2, 8, 16, 60, 128, 256, 384]), T=st.integers(1, 40))
def test_route_weights_are_the_expression(data, E, T):
    """Weights from the same launch: the gathered score, divided by the
    slot-order sum, times fl32(scale); scores drawn with +-0, Inf, NaN and
    subnormals, so the sum's order and the division's rounding show."""
    k = data.draw(st.integers(1, min(E, 9)))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    pool = torch.tensor(data.draw(st.lists(st.sampled_from(SPECIALS) | st.floats(width=32), min_size=1,
                                           max_size=6)), dtype=torch.float32)
    keys = pool[torch.randint(0, len(pool), (T, E), generator=g)]
    spool = torch.tensor(data.draw(st.lists(st.sampled_from(SPECIALS) | st.floats(width=32, min_value=0.0),
                                            min_size=1, max_size=8)), dtype=torch.float32)
    scores = torch.where(torch.rand(T, E, generator=g) < 0.5, spool[torch.randint(0, len(spool), (T, E),
                                                                                  generator=g)],
                         torch.rand(T, E, generator=g))
    _check_route(keys, scores, k, data.draw(st.booleans()), data.draw(st.sampled_from(SCALES)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,E,k", EDGE_SHAPES)
def test_route_edges(T, E, k, device):
    g = torch.Generator().manual_seed(T * 11 + E)
    logits = torch.randn(T, E, generator=g)
    logits[0] = 0.0  # a row of ties: equal weights
    scores = torch.softmax(logits, dim=-1)
    scores[-1, : E // 2] = torch.rand(E // 2, generator=g) * 2.0**-130  # subnormal scores
    combos = [(rn, sc) for rn in (True, False) for sc in SCALES]
    for renormalize, scale in combos if T < 1024 else combos[2:4]:  # the interpreter's time: two at 4096 rows
        _check_route(logits, scores, k, renormalize, scale, device)
    _check_route(logits.t().contiguous().t(), scores.t().contiguous().t(), k, True, 2.5, device)


def _check_softmax_route(logits, k, renormalize, scale, device="cpu"):
    """The launch's own softmax: the sort's ids, and weights within the
    routing weights' bound of the float64 reference (the contract torch's
    softmax is held to; the launch's sum order is its own)."""
    from harness.moe import reference, tolerance

    ids, w = topk.topk_route(logits.to(device), None, k, renormalize, scale)
    w_ref, ids_ref = reference.reference_route(logits, k, scoring="softmax", renormalize=renormalize,
                                               routed_scaling_factor=scale)
    assert torch.equal(ids.cpu(), ids_ref) and torch.equal(ids_ref, _want(logits, k))
    err = (w.cpu().double() - w_ref).abs()
    tol = tolerance.routing_weight_tolerance(w_ref, logits.shape[1],
                                             reference.exp_argument_spread(logits, ids_ref, "softmax"))
    assert bool((err <= tol).all()), (float((err / tol).max()), logits.tolist())


def _grid_logits(T, E, g, style):
    """The routing properties' logit styles (harness.strategies): multiples of 1/4
    in [-8, 8], ties, +-1e4 entries (x - max exact there); "wide": any float32
    logits at a spread of 10 and 30 (x - max rounds, exp's result down to
    float32's subnormals: the bound's spread term and floor)."""
    grid = torch.randint(-32, 33, (T, E), generator=g).float() / 4
    if style == "wide":
        return torch.randn(T, E, generator=g) * torch.where(torch.rand(T, 1, generator=g) < 0.5, 10.0, 30.0)
    if style == "ties":
        return torch.randint(0, 2, (T, E), generator=g).float()
    if style == "extreme":
        sign = torch.where(torch.rand(T, E, generator=g) < 0.5, 1.0, -1.0)
        return torch.where(torch.rand(T, E, generator=g) < 0.3, sign * 1e4, grid)
    return grid


@settings(max_examples=30, deadline=None)
@given(data=st.data(), E=st.sampled_from([1, 2, 3, 8, 60, 128, 256]), T=st.integers(1, 20))
def test_softmax_route_is_within_the_bound(data, E, T):
    """Logits shifted by +-95 too (exp(x) without the max subtracted overflows
    or underflows) and E not a power of two (padding lanes kept out of the sum)."""
    k = data.draw(st.integers(1, min(E, 9)))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    logits = _grid_logits(T, E, g, data.draw(st.sampled_from(["grid", "ties", "extreme", "wide"])))
    logits = logits + data.draw(st.sampled_from([0.0, 95.0, -95.0]))
    _check_softmax_route(logits, k, data.draw(st.booleans()), data.draw(st.sampled_from(SCALES)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,E,k", [(1, 128, 8), (16, 128, 8), (1024, 128, 4), (7, 60, 8), (3, 1024, 16),
                                   (5, 8, 8), (33, 8, 2)])
def test_softmax_route_edges(T, E, k, device):
    g = torch.Generator().manual_seed(T * 13 + E)
    for style, shift in (("grid", 95.0), ("ties", 0.0), ("extreme", 0.0), ("grid", -95.0), ("wide", 0.0)):
        logits = _grid_logits(T, E, g, style) + shift
        for renormalize in (True, False):
            _check_softmax_route(logits, k, renormalize, 2.827 if renormalize else 1.0, device)


def test_a_rounded_exp_argument_is_in_the_bound():
    """x - max rounds once the logits are apart in magnitude: here fl32(x - m)
    is off by half an ulp of 34.5 (32u), and so is a correct float32 softmax's
    weight of x, beyond (2E + 2k + 18) u = 26u at E = k = 2. The bound's spread
    term (reference.exp_argument_spread) holds it, for torch's softmax and the
    top-k launch's own."""
    from harness.moe import reference, routing, tolerance
    from harness.moe.arch import MoEArch

    logits = torch.tensor([[0.7213764190673828, -33.82779312133789]])
    assert float(logits[0, 1] - logits[0, 0]) != float(logits[0, 1].double() - logits[0, 0].double())
    w_ref, ids = reference.reference_route(logits, 2, scoring="softmax")
    spread = reference.exp_argument_spread(logits, ids, "softmax")
    w_torch, ids_torch = routing.route_arch(logits, MoEArch(top_k=2, scoring="softmax"), None)
    ids_own, w_own = topk.topk_route(logits, None, 2, False, 1.0)
    assert torch.equal(ids_torch.long(), ids) and torch.equal(ids_own.long(), ids)
    for w in (w_torch, w_own):
        err = (w.double() - w_ref).abs()
        assert bool((err <= tolerance.routing_weight_tolerance(w_ref, 2, spread)).all())
        assert not bool((err <= tolerance.routing_weight_tolerance(w_ref, 2, torch.zeros_like(spread))).all())


def test_topk_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match="outside the kernel"):
        topk.topk_ids(torch.zeros(2, topk.MAX_EXPERTS + 1), 2)
    with pytest.raises(ValueError, match="outside the kernel"):
        topk.topk_ids(torch.zeros(2, 4), 5)
    with pytest.raises(ValueError, match="float32 keys"):
        topk.topk_ids(torch.zeros(2, 4, dtype=torch.float64), 2)
    assert topk.topk_ids(torch.zeros(0, 4), 2).shape == (0, 2)
    with pytest.raises(ValueError, match="scores must be float32"):
        topk.topk_route(torch.zeros(2, 4), torch.zeros(2, 5), 2, True)
    with pytest.raises(ValueError, match="scores must be float32"):
        topk.topk_route(torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.bfloat16), 2, True)
    with pytest.raises(ValueError, match="outside the kernel"):
        topk.topk_route(torch.zeros(2, 4), torch.zeros(2, 4), 5, True)
    ids, w = topk.topk_route(torch.zeros(0, 4), torch.zeros(0, 4), 2, True)
    assert ids.shape == w.shape == (0, 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_routing_selects_what_the_sort_selects(monkeypatch):
    """route_arch on CUDA with the kernel against route_arch on CUDA with
    the sort, for every row kind: the same ids; the same weight bits where
    torch computes the scores, and where the launch computes the softmax
    (ungrouped, no correction bias) weights within the routing bound of the
    float64 reference -- a grouped softmax keeps torch's scores of all experts."""
    from harness.moe import reference, routing, tolerance
    from harness.moe.arch import MoEArch

    g = torch.Generator().manual_seed(5)
    logits = (torch.randint(-4, 4, (64, 128), generator=g).float() / 4).cuda()  # many ties
    bias = torch.randn(128, generator=g).cuda()
    archs = ((MoEArch(top_k=8, scoring="softmax", renormalize=True), None, True),
             (MoEArch(top_k=4, scoring="softmax", routed_scaling_factor=2.5), None, True),
             (MoEArch(top_k=8, scoring="softmax", renormalize=True, n_group=8, topk_group=4), None, False),
             (MoEArch(top_k=8, scoring="sigmoid", renormalize=True, n_group=8, topk_group=4,
                      routed_scaling_factor=2.5, score_correction=True), bias, False),
             (MoEArch(top_k=4, scoring="softmax_topk"), None, False))
    got = [routing.route_arch(logits, arch, b) for arch, b, _ in archs]
    monkeypatch.setattr(topk, "applies", lambda E, k: False)
    for (arch, b, own_softmax), (w, i) in zip(archs, got):
        w_sort, i_sort = routing.route_arch(logits, arch, b)
        assert torch.equal(i, i_sort), arch
        if own_softmax:
            w_ref, _ = reference.reference_route(logits.cpu(), arch.top_k, scoring="softmax",
                                                 renormalize=arch.renormalize,
                                                 routed_scaling_factor=arch.routed_scaling_factor)
            tol = tolerance.routing_weight_tolerance(w_ref, 128, reference.exp_argument_spread(logits, i.cpu(), "softmax"))
            assert bool(((w.cpu().double() - w_ref).abs() <= tol).all())
        else:
            assert torch.equal(w.view(torch.int32), w_sort.view(torch.int32)), arch
