"""Quick smoke tests of harness.moe (the layer author's own; the property
suites and regression tests live elsewhere). Tiny shapes, < 20 s."""
from __future__ import annotations

import pytest
import torch

import harness.formats as hf
import harness.moe as hm
from harness.kernels import fused_gemm
from harness.kernels import launch_config as lc
from harness.kernels.error_bound import gemm_error_bound
from harness.kernels.fused_weights import FusedWeights
from harness.kernels.precision import resolve_precision
from harness.kernels.split_k import split_k
from harness.moe import quantize_input

E, H, I, T, K = 4, 64, 32, 6, 2


@pytest.fixture(scope="module")
def problem():
    g = torch.Generator().manual_seed(1)
    w13 = torch.randn(E, 2 * I, H, generator=g) * 0.1
    w2 = torch.randn(E, H, I, generator=g) * 0.1
    x = torch.randn(T, H, generator=g)
    lg = torch.randn(T, E, generator=g)
    a1, a2 = hm.calibrate_activation_scales(w13, w2, x, lg, top_k=K)
    return w13, w2, x, lg, a1, a2


@pytest.mark.parametrize("scheme", hm.SCHEME_NAMES + ("bf16",))
def test_every_scheme_runs_and_counts_qdq(problem, scheme, monkeypatch):
    w13, w2, x, lg, a1, a2 = problem
    moe = hm.build_emulated_moe(scheme, w13, w2, top_k=K, a1_gscale=a1, a2_gscale=a2)
    calls = []
    real = quantize_input.moe_kernel_quantize_input
    monkeypatch.setattr(quantize_input, "moe_kernel_quantize_input",
                        lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
    y = moe(x.to(torch.bfloat16), lg)
    assert y.shape == (T, H) and y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    s = hm.get_scheme(scheme)
    assert calls == ([] if s.act_fmt is None else [s.quant_dtype] * 2)
    assert moe(x[:0], lg[:0]).shape == (0, H)


def test_routing_ties_and_scoring():
    lg = torch.zeros(3, 5)
    w, ids = hm.route(lg, 2)
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    assert ids.tolist() == [[0, 1]] * 3
    lg = torch.tensor([[1.0, 3.0, 3.0, 0.0]])
    assert hm.route(lg, 2, scoring="sigmoid")[1].tolist() == [[1, 2]]
    w, _ = hm.route(torch.randn(4, 8), 3, renormalize=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(4))
    w, ids = hm.route(torch.randn(0, 8), 2)
    assert w.shape == (0, 2) and ids.shape == (0, 2)


def test_dispatcher_refuses_unknown_and_missing_scale():
    x = torch.randn(2, 32)
    with pytest.raises(ValueError):
        hm.moe_kernel_quantize_input(x, None, "mxfp6")
    with pytest.raises(ValueError):
        hm.moe_kernel_quantize_input(x, None, "nvfp4")
    assert hm.moe_kernel_quantize_input(x, None, None)[0] is x
    y, s = hm.moe_kernel_quantize_input(x, torch.tensor(100.0), "nvfp4")
    assert s is None and torch.equal(y, hf.qdq(x, "nvfp4", global_scale=torch.tensor(100.0)))
    assert torch.equal(hm.moe_kernel_quantize_input(x, None, "mxfp4")[0], hf.qdq(x, "mxfp4", scale_mode="even"))


def test_shared_config_not_mutated(problem):
    w13, w2, x, lg, a1, a2 = problem
    qc = hm.build_quant_config("nvfp4", w13, w2, a1_gscale=a1, a2_gscale=a2)
    before = dict(vars(qc))
    e1, e2 = hm.make_experts(qc), hm.make_experts(qc)
    assert all(vars(qc)[k] is v for k, v in before.items())
    w, ids = hm.route(lg, K)
    assert torch.equal(e1.apply(x, w, ids), e2.apply(x, w, ids))


@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp8"])
@pytest.mark.parametrize("backend", list(hm.MoEBackend))
def test_create_and_convert_every_branch(scheme, backend):
    layer = hm.create_moe_weights(torch.nn.Module(), scheme, E, H, I, backend)
    assert hasattr(layer, "w13_weight_scale") and hasattr(layer, "w2_weight_scale")
    assert not hasattr(layer, "weight")
    out = hm.convert_layer_weights(layer, scheme, backend)
    assert out["quant_config"].device == layer.w13_weight.device
    assert (out["kernel_weights"] is not None) == (backend is hm.MoEBackend.TRITON_FUSED)


def test_modelopt_and_compressed_tensors_agree(problem):
    w13, w2, *_ = problem
    q13, g13 = hm.quantize_expert_weights(w13, "nvfp4")
    q2, g2 = hm.quantize_expert_weights(w2, "nvfp4")
    f8 = torch.float8_e4m3fn
    mo = hm.load_modelopt_nvfp4({
        "w13_weight": hf.pack_fp4(q13.codes), "w13_weight_scale": q13.scales.view(f8), "w13_weight_scale_2": 1 / g13,
        "w2_weight": hf.pack_fp4(q2.codes), "w2_weight_scale": q2.scales.view(f8), "w2_weight_scale_2": 1 / g2})
    ct = hm.load_compressed_tensors_nvfp4({
        "w13_weight_packed": hf.pack_fp4(q13.codes), "w13_weight_scale": q13.scales.view(f8),
        "w13_weight_global_scale": g13, "w2_weight_packed": hf.pack_fp4(q2.codes),
        "w2_weight_scale": q2.scales.view(f8), "w2_weight_global_scale": g2})
    d_mo = hm.make_experts(mo).dequantize_weights()
    d_ct = hm.make_experts(ct).dequantize_weights()
    # 1/(1/g) may differ from g in the last bit: compare to the float tolerance
    for a, b in zip(d_mo, d_ct):
        torch.testing.assert_close(a, b, rtol=2e-7, atol=0)
    assert torch.equal(mo.w13_q.codes, q13.codes)


def test_fused_dequant_bitwise_and_gemm_bound(problem):
    w13, w2, x, lg, a1, a2 = problem
    for scheme in ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e3m2_a_mxfp6_e3m2"):
        q, g = hm.quantize_expert_weights(w13, scheme)
        fw = FusedWeights.from_quantized(q, g)
        deq = hm.ops.dequantize_expert_weights(q, g, backend="torch")
        assert torch.equal(fused_gemm.fused_dequantize(fw).view(torch.int32), deq.view(torch.int32))
        _, ids = hm.route(lg, K)
        ids = ids.reshape(-1)
        xs = x.repeat_interleave(K, 0)
        yf = fused_gemm.moe_gemm(xs, ids, fw)
        yu = hm.experts._grouped_gemm_unfused(xs, ids, deq)
        bound = gemm_error_bound(xs, ids, deq)
        assert ((yf - yu).abs().double() <= bound).all()


def test_fused_gemm1_reads_token_rows(problem):
    """GEMM1 reads x per token (x_row_div = top_k: pair p is token p // k):
    bit for bit the GEMM on the expanded [P, K] copy, in both modes; a row
    count that does not match the pairs is refused."""
    w13, w2, x, lg, a1, a2 = problem
    q, g = hm.quantize_expert_weights(w13, "w_mxfp4_a_mxfp4")
    fw = FusedWeights.from_quantized(q, g)
    _, ids = hm.route(lg, K)
    ids = ids.reshape(-1)
    xs = x.repeat_interleave(K, 0)
    for mode in ("fused", "predequant"):
        want = fused_gemm.moe_gemm(xs, ids, fw, mode=mode)
        got = fused_gemm.moe_gemm(x, ids, fw, mode=mode, x_row_div=K)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), mode
    with pytest.raises(ValueError, match="x_row_div"):
        fused_gemm.moe_gemm(x[:-1], ids, fw, x_row_div=K)


def test_fused_layer_close_to_unfused(problem):
    w13, w2, x, lg, a1, a2 = problem
    yu = hm.build_emulated_moe("w_mxfp4_a_mxfp4", w13, w2, top_k=K)(x, lg)
    yf = hm.build_emulated_moe("w_mxfp4_a_mxfp4", w13, w2, top_k=K, backend="fused")(x, lg)
    torch.testing.assert_close(yf, yu, rtol=1e-5, atol=1e-5)


def test_fused_modes_share_operands(problem):
    w13, w2, x, lg, a1, a2 = problem
    q, g = hm.quantize_expert_weights(w13, "w_mxfp4_a_mxfp6_e2m3")
    fw = FusedWeights.from_quantized(q, g)
    deq = hm.ops.dequantize_expert_weights(q, g, backend="torch")
    _, ids = hm.route(lg, K)
    ids = ids.reshape(-1)
    xs = x.repeat_interleave(K, 0)
    yu = hm.experts._grouped_gemm_unfused(xs, ids, deq)
    bound = gemm_error_bound(xs, ids, deq)
    for mode in ("fused", "predequant"):
        y = fused_gemm.moe_gemm(xs, ids, fw, mode=mode)
        assert ((y - yu).abs().double() <= bound).all()
    with pytest.raises(ValueError):
        fused_gemm.moe_gemm(xs, ids, fw, mode="nope")


@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8"])
def test_fused_gemm_tiles_that_do_not_divide(scheme):
    """N and K that the tiles do not divide take the masked loads (EVEN_NK off,
    chosen automatically), shapes that they divide the unmasked ones: both
    within the GEMM contract, and masked == unmasked bitwise where both apply."""
    g = torch.Generator().manual_seed(3)
    E, N, K_ = 3, 48, 96  # BLOCK_N 32 / BLOCK_K 64 leave partial tiles in both
    w = torch.randn(E, N, K_, generator=g) * 0.1
    q, gs = hm.quantize_expert_weights(w, scheme)
    fw = FusedWeights.from_quantized(q, gs)
    deq = hm.ops.dequantize_expert_weights(q, gs, backend="torch")
    x = torch.randn(10, K_, generator=g)
    ids = torch.randint(0, E, (10,), generator=g)
    yu = hm.experts._grouped_gemm_unfused(x, ids, deq)
    bound = gemm_error_bound(x, ids, deq)
    ragged = fused_gemm.moe_gemm(x, ids, fw, config=dict(BLOCK_N=32, BLOCK_K=64))
    assert ((ragged - yu).abs().double() <= bound).all()
    even = fused_gemm.moe_gemm(x, ids, fw, config=dict(BLOCK_N=16, BLOCK_K=32))
    masked = fused_gemm.moe_gemm(x, ids, fw, config=dict(BLOCK_N=16, BLOCK_K=32, EVEN_NK=False))
    assert ((even - yu).abs().double() <= bound).all()
    assert torch.equal(even.view(torch.int32), masked.view(torch.int32))
    # the GPU tables' decode flags (e2m1 decoded from whole bytes), masked and ragged tails
    tuned = dict(FAST_DECODE=True, MULT_BCAST=True, PACK_JOIN=True, BYTE_DECODE=True)
    got = fused_gemm.moe_gemm(x, ids, fw, config=dict(BLOCK_N=16, BLOCK_K=32, EVEN_NK=False, **tuned))
    assert torch.equal(got.view(torch.int32), masked.view(torch.int32))
    got = fused_gemm.moe_gemm(x, ids, fw, config=dict(BLOCK_N=32, BLOCK_K=64, **tuned))
    assert torch.equal(got.view(torch.int32), ragged.view(torch.int32))
    # N whole, K with a tail (K_TAIL: the last BLOCK_K alone masked), in one split and in two (the second
    # split holds only the tail): the bits of the same tile with masks on every BLOCK_K
    for split in (1, 2):
        for extra in ({}, tuned):
            tile = dict(BLOCK_N=16, BLOCK_K=64, SPLIT_K=split, **extra)
            assert lc.select_launch("gemm", "interpreter", kind=fw.kind, fmt=fw.fmt, n=N, k=K_, override=tile).K_TAIL
            tail = fused_gemm.moe_gemm(x, ids, fw, config=tile)
            masked = fused_gemm.moe_gemm(x, ids, fw, config=dict(tile, EVEN_NK=False))
            assert ((tail - yu).abs().double() <= bound).all()
            assert torch.equal(tail.view(torch.int32), masked.view(torch.int32))


# a hidden size whose w13 scale rows take the kernel's scale order "n" (launch_config.scale_order: a long K loop,
# 33 or 66 scale bytes a row)
WIDE_H = lc.SHORT_K_MAX + 32


@pytest.mark.parametrize("hidden", [H, WIDE_H])
@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8"])
def test_fused_layer_holds_no_more_than_the_checkpoint(problem, scheme, hidden):
    """The kernel format is the checkpoint's bytes: fp4 codes packed two a
    byte (wider codes: the config's own code tensor), the config's block
    scale bytes (the kernel decodes each multiplier; the config's own tensor,
    or a copy in the kernel's scale order) and, for two-level rows,
    one float32 global scale per expert; 0.53 B a weight for MXFP4, 0.5625
    for NVFP4. A global scale that is not one per expert (or one for all), or
    one given to an MX row, is refused, naming the shapes."""
    w13, w2, x, lg, a1, a2 = problem
    if hidden != H:
        g = torch.Generator().manual_seed(9)
        w13, w2 = torch.randn(E, 2 * I, hidden, generator=g) * 0.1, torch.randn(E, hidden, I, generator=g) * 0.1
    moe = hm.build_emulated_moe(scheme, w13, w2, top_k=K, a1_gscale=a1, a2_gscale=a2, backend="fused")
    qc = moe.quant_config
    spec = qc.scheme.weight_spec
    orders = []
    for fw, q, gs in zip(moe.experts._kernel_weights, (qc.w13_q, qc.w2_q), (qc.w13_gscale, qc.w2_gscale)):
        n = fw.E * fw.N * fw.K
        assert fw.scales.dtype == torch.uint8 and torch.equal(fw.scales, q.scales)
        # the config's scale bytes themselves, or (launch_config.scale_order "n": WIDE_H's w13) a copy in the
        # kernel's order; the config's stay as they are
        assert fw.scale_order == lc.scale_order(fw.N, fw.K, spec.block_size)
        assert (fw.scales.data_ptr() == q.scales.data_ptr()) == (fw.scale_order == "k") and q.scales.is_contiguous()
        orders.append(fw.scale_order)
        if spec.is_fp4:  # eight codes a 32-bit word (fp4_words), half a byte each
            assert fw.data.dtype == torch.uint8 and fw.data.numel() == n // 2
        else:
            assert fw.data.data_ptr() == q.codes.data_ptr()
        assert (fw.gscale is not None) == spec.is_two_level
        if spec.is_two_level:
            assert fw.gscale.dtype == torch.float32 and fw.gscale.shape == (fw.E,)
            assert torch.equal(fw.gscale, gs.reshape(-1).float())
        code_bytes = n // 2 if spec.is_fp4 else n
        assert fw.nbytes() == code_bytes + n // spec.block_size + (4 * fw.E if spec.is_two_level else 0)
    assert orders == (["n", "k"] if hidden == WIDE_H else ["k", "k"])
    q, gs = qc.w13_q, qc.w13_gscale
    if spec.is_two_level:
        with pytest.raises(ValueError, match=rf"global scale of 2 values for {E} experts \(shape \[2\]\)"):
            FusedWeights.from_quantized(q, gs.reshape(-1)[:2])
        one = FusedWeights.from_quantized(q, gs.reshape(-1)[:1])  # one value for every expert
        assert torch.equal(one.gscale, gs.reshape(-1)[:1].float().expand(E))
        with pytest.raises(ValueError, match="need the per-expert global scale"):
            FusedWeights.from_quantized(q, None)
    else:
        with pytest.raises(ValueError, match="takes no global scale"):
            FusedWeights.from_quantized(q, torch.ones(E))


def _split_k_sums_the_k_ranges(scheme, dev):
    """Split-K (decode sizes on GPU) gives each program one K range and sums
    the partials in split order. Two splits of K=96 at BLOCK_K=32 cover
    [0, 64) and [64, 96): the result is bit for bit the sum of those two
    ranges' GEMMs (each the plain launch on x with the other range zeroed,
    which adds exact zeros), so a range skipped, counted twice or written to
    the wrong partial shows; three splits stay within contract (2)."""
    g = torch.Generator().manual_seed(5)
    E, N, K_ = 3, 32, 96
    w = (torch.randn(E, N, K_, generator=g) * 0.1).to(dev)
    q, gs = hm.quantize_expert_weights(w, scheme)
    fw = FusedWeights.from_quantized(q, gs)
    deq = hm.ops.dequantize_expert_weights(q, gs, backend="torch")
    x = torch.randn(7, K_, generator=g).to(dev)
    ids = torch.randint(0, E, (7,), generator=g).to(dev)
    cfg = dict(BLOCK_N=16, BLOCK_K=32)
    head, tail = x.clone(), x.clone()
    head[:, 64:] = 0
    tail[:, :64] = 0
    parts = fused_gemm.moe_gemm(head, ids, fw, config=cfg) + fused_gemm.moe_gemm(tail, ids, fw, config=cfg)
    two = fused_gemm.moe_gemm(x, ids, fw, config=dict(cfg, SPLIT_K=2))
    assert torch.equal(two.view(torch.int32), parts.view(torch.int32))
    assert not torch.equal(two, fused_gemm.moe_gemm(head, ids, fw, config=cfg))
    yu = hm.experts._grouped_gemm_unfused(x, ids, deq)
    bound = gemm_error_bound(x, ids, deq)
    for splits in (2, 3, 8):  # 8 asks more splits than BLOCK_Ks: capped at 3, none empty
        y = fused_gemm.moe_gemm(x, ids, fw, config=dict(cfg, SPLIT_K=splits))
        assert ((y - yu).abs().double() <= bound).all()
    with pytest.raises(ValueError, match="SPLIT_K must be an int >= 1, got 0"):
        fused_gemm.moe_gemm(x, ids, fw, config=dict(cfg, SPLIT_K=0))


@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4_a_mxfp4"])
def test_fused_gemm_split_k_sums_the_k_ranges(scheme):
    _split_k_sums_the_k_ranges(scheme, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4_a_mxfp4"])
def test_fused_gemm_split_k_sums_the_k_ranges_gpu(scheme, gpu_device):
    _split_k_sums_the_k_ranges(scheme, gpu_device)


def test_split_k_choice_fills_the_gpu_at_decode_only():
    """The split count comes from shapes alone (graph-capturable): GEMMs that
    leave the SMs idle at decode are split, prefill and the interpreter never."""
    sms = 132
    # Mixtral GEMM2 at T=1 (2 pairs, N=4096 in 64 tiles, K=14336): 128 programs -> 2 x 132 wanted
    assert split_k(2, 8, 64, 14336, 16, 256, sms) == 4
    # Mixtral GEMM1 at T=1 (448 tiles): already 896 programs
    assert split_k(2, 8, 448, 4096, 16, 256, sms) == 1
    # Mixtral GEMM2 at T=16 (32 pairs over 8 experts: 512 programs): 2 splits (nvfp4 1.24x on the H200)
    assert split_k(32, 8, 64, 14336, 16, 256, sms) == 2
    # Mixtral GEMM1 at T=16: 3584 programs
    assert split_k(32, 8, 448, 4096, 16, 256, sms) == 1
    # prefill: thousands of programs
    assert split_k(8192, 8, 64, 14336, 128, 64, sms) == 1
    # a K of one BLOCK_K cannot split
    assert split_k(2, 8, 4, 256, 16, 256, sms) == 1
    # Qwen3-30B-A3B GEMM1 at T=1 (8 experts x 24 tiles, K = 8 BLOCK_Ks): split was slower on the H200
    assert split_k(8, 128, 24, 2048, 16, 256, sms) == 1
    # the selector applies it on a GPU, never on the interpreter
    kw = dict(kind=1, fmt="mxfp4", bf16=True, block_m=16, n=4096, k=14336, pairs=2, experts=8, sm_count=sms)
    assert lc.select_launch("gemm", "cuda", **kw).SPLIT_K == 4
    assert lc.select_launch("gemm", "interpreter", **dict(kw, bf16=False, sm_count=None)).SPLIT_K == 1


def _nvfp4_bf16_post_factor(dev):
    """nvfp4 in precision "bf16": the kernel scales each dot by fl(fl(1 /
    gs_w[e]) * fl(1 / gs_a)), the exact float32 ops of torch's reciprocals.
    One-hot rows pick single weights: x * gs_a = 3 in bf16, 3 * e2m1 * s is
    exact, so every output is fl(3 e2m1 s * fl(post[e] * fl(1/3)))."""
    g = torch.Generator().manual_seed(11)
    E, N, K_ = 2, 16, 64
    w = (torch.randn(E, N, K_, generator=g) * 0.1).to(dev)
    q, gs = hm.quantize_expert_weights(w, "nvfp4")
    fw = FusedWeights.from_quantized(q, gs)
    ws = hf.dequantize(hf.QuantizedTensor(q.codes, q.scales, torch.ones_like(gs).reshape(E, 1), "nvfp4"))  # e2m1 * s
    a_gs = torch.tensor(3.0, device=dev)
    x = torch.eye(K_, device=dev).repeat(E, 1)
    ids = torch.arange(E, device=dev).repeat_interleave(K_)
    y = fused_gemm.moe_gemm(x, ids, fw, precision="bf16", a_gscale=a_gs, mode="fused").reshape(E, K_, N)
    factor = (1.0 / fw.gscale) * (1.0 / a_gs)  # fl(fl(1/gs_w[e]) * fl(1/3))
    want = (3.0 * ws.transpose(1, 2)) * factor.reshape(E, 1, 1)
    assert torch.equal(y, want)


def test_bf16_precision_is_refused_on_the_interpreter():
    """The Triton interpreter computes bf16 dots wrongly (one-hot rows gave
    7.9e8 for weights of 0.06): precision "bf16" on CPU is an error, never a
    silently wrong GEMM; "auto" picks "ieee" there."""
    q, gs = hm.quantize_expert_weights(torch.randn(2, 16, 64) * 0.1, "w_mxfp4_a_mxfp4")
    fw = FusedWeights.from_quantized(q, gs)
    x, ids = torch.randn(4, 64), torch.tensor([0, 1, 1, 0])
    with pytest.raises(ValueError, match="precision 'bf16' needs a CUDA/ROCm device"):
        fused_gemm.moe_gemm(x, ids, fw, precision="bf16")
    assert resolve_precision("auto", hm.get_scheme("w_mxfp4_a_mxfp4"), "cpu") == "ieee"


def test_x_scaled_is_refused_without_the_post_factor_that_takes_it():
    """x_scaled (x is already bf16(x_qdq * gs_a), the QDQ's bf16_operand) is the
    operand of a two-level GEMM in precision "bf16" only, where the kernel
    applies 1 / gs_a after the dot: anywhere else it is a ValueError, never a
    GEMM on values still carrying the global scale."""
    g = torch.Generator().manual_seed(2)
    ids = torch.tensor([0, 1, 1, 0])
    x = (torch.randn(4, 64, generator=g)).to(torch.bfloat16)
    for scheme in ("nvfp4", "w_mxfp4_a_mxfp4"):
        q, gs = hm.quantize_expert_weights(torch.randn(2, 16, 64, generator=g) * 0.1, scheme)
        fw = FusedWeights.from_quantized(q, gs)
        with pytest.raises(ValueError, match="x_scaled: x is bf16\\(x_qdq \\* a_gscale\\).*precision 'ieee'"):
            fused_gemm.moe_gemm(x, ids, fw, precision="ieee", a_gscale=torch.tensor(3.0), x_scaled=True)


# What "auto" runs on a GPU, by scheme row: bf16 operands where they are exact
# (MX x MX, nvfp4 rescaled) or 16-bit by definition (weight-only W4A16/W8A16,
# as the production kernels run them); float32 for fp8 per-tensor activations
# and unquantized weights. Every row is named, so a new row needs a decision here.
_AUTO_ON_GPU = {"nvfp4": "bf16", "w_mxfp4_a_mxfp4": "bf16", "w_mxfp4_a_mxfp6_e3m2": "bf16",
                "w_mxfp4_a_mxfp6_e2m3": "bf16", "w_mxfp4_a_fp8": "ieee", "w_mxfp6_e3m2_a_mxfp6_e3m2": "bf16",
                "w_mxfp6_e2m3_a_mxfp6_e2m3": "bf16", "w_mxfp8": "bf16", "w_mxfp4": "bf16", "bf16": "ieee"}


def test_auto_precision_on_a_gpu_by_scheme_row():
    assert set(_AUTO_ON_GPU) == set(hm.SCHEME_NAMES) | {"bf16"}
    for name, want in _AUTO_ON_GPU.items():
        assert resolve_precision("auto", hm.get_scheme(name), "cuda") == want, name
        assert resolve_precision("auto", hm.get_scheme(name), "cpu") == "ieee", name


@pytest.mark.gpu
def test_nvfp4_bf16_post_factor_in_kernel_gpu(gpu_device):
    _nvfp4_bf16_post_factor(gpu_device)
