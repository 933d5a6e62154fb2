"""keep_codes=False: a fused layer releases its unpacked expert weight codes
once its kernel weights are built. Its outputs are bit for bit those of a
layer that keeps them; the codes are freed, not moved; the shape facts of its
quant config still answer; every reader of the codes fails in one clear line;
the unfused backend refuses the option. Tiny shapes, fused backend through the
Triton interpreter on CPU."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

import harness.formats as hf
import harness.moe as hm
from harness.emulation.moe_swap import OracleMoE, keep_codes_for
from harness.kernels import launch_config as lc
from harness.kernels.fused_weights import FusedWeights
from harness.moe.config import CodesReleasedError
from harness.testing.checks.bitwise import assert_bitwise_equal

pytestmark = pytest.mark.usefixtures("one_thread")

E, H, I, T, K = 4, 64, 32, 6, 2
HINT = r"keep_codes=True"


@pytest.fixture(scope="module")
def problem():
    g = torch.Generator().manual_seed(3)
    w13 = torch.randn(E, 2 * I, H, generator=g) * 0.1
    w2 = torch.randn(E, H, I, generator=g) * 0.1
    x = torch.randn(T, H, generator=g)
    lg = torch.randn(T, E, generator=g)
    b13 = torch.randn(E, 2 * I, generator=g) * 0.01
    b2 = torch.randn(E, H, generator=g) * 0.01
    a1, a2 = hm.calibrate_activation_scales(w13, w2, x, lg, top_k=K)
    return dict(w13=w13, w2=w2, x=x, lg=lg, b13=b13, b2=b2, a1=a1, a2=a2)


def _build(p, scheme, keep_codes, bias=False, backend="fused"):
    kw = dict(w13_bias=p["b13"], w2_bias=p["b2"]) if bias else {}
    return hm.build_emulated_moe(scheme, p["w13"], p["w2"], top_k=K, a1_gscale=p["a1"], a2_gscale=p["a2"],
                                 backend=backend, keep_codes=keep_codes, **kw)


# nvfp4 (two-level, packed fp4), MX with MX activations, MXFP8 weight-only (the kernel
# format IS the code tensor), gpt-oss's W4A16 with expert biases
@pytest.mark.parametrize("scheme, bias", [("nvfp4", False), ("w_mxfp4_a_mxfp4", False), ("w_mxfp8", False),
                                          ("w_mxfp4", True)])
def test_outputs_bit_identical_without_codes(problem, scheme, bias):
    keep, lean = _build(problem, scheme, True, bias), _build(problem, scheme, False, bias)
    assert not keep.quant_config.codes_released and lean.quant_config.codes_released
    for dt in (torch.float32, torch.bfloat16):
        x = problem["x"].to(dt)
        assert_bitwise_equal(lean(x, problem["lg"]), keep(x, problem["lg"]),
                             f"{scheme} fused keep_codes=False vs True ({dt})")


def test_shape_facts_answer_and_the_given_config_is_not_written(problem):
    qc = hm.build_quant_config("nvfp4", problem["w13"], problem["w2"], a1_gscale=problem["a1"],
                               a2_gscale=problem["a2"])
    before = dict(vars(qc))
    lean = hm.make_experts(qc, backend="fused", keep_codes=False)
    assert all(vars(qc)[k] is v for k, v in before.items())  # shared config untouched
    keep = hm.make_experts(qc, backend="fused")                # a second layer from it still has its codes
    r = lean.quant_config
    assert r is not qc and r.codes_released
    assert (r.num_experts, r.hidden_size, r.intermediate_size, r.device) == (E, H, I, torch.device("cpu"))
    assert (r.scheme, r.quant_dtype, r.w13_gscale, r.a1_gscale) == (qc.scheme, qc.quant_dtype, qc.w13_gscale,
                                                                   qc.a1_gscale)
    assert r.w13_q.fmt == "nvfp4" and tuple(r.w2_q.shape) == (E, H, I) and lean.num_experts == E
    w, ids = hm.route(problem["lg"], K)
    assert_bitwise_equal(lean.apply(problem["x"], w, ids), keep.apply(problem["x"], w, ids), "experts.apply")


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("keep_codes", [True, False])
def test_codes_are_freed_not_moved(problem, keep_codes, wide):
    """`wide`: w13's K a long loop of 33 scale bytes a row, which the kernel
    stores in scale order "n" (launch_config.scale_order), a copy of its own."""
    w13, w2 = problem["w13"], problem["w2"]
    if wide:
        g = torch.Generator().manual_seed(8)
        k = lc.SHORT_K_MAX + 32
        w13, w2 = torch.randn(E, 2 * I, k, generator=g) * 0.1, torch.randn(E, k, I, generator=g) * 0.1
    qc = hm.build_quant_config("w_mxfp4_a_mxfp4", w13, w2)
    refs = [weakref.ref(t) for t in (qc.w13_q.codes, qc.w13_q.scales, qc.w2_q.codes, qc.w2_q.scales)]
    experts = hm.make_experts(qc, backend="fused", keep_codes=keep_codes)
    del qc
    gc.collect()
    alive = [r() is not None for r in refs]
    # the unpacked codes go; the scale bytes stay, once: the kernel format decodes its multipliers from them.
    # In scale order "n" the kernel holds its own copy, and the config's bytes go with its codes
    shared = [fw.scale_order == "k" for fw in experts._kernel_weights]
    assert shared == [not wide, True]
    assert alive == [keep_codes, keep_codes or shared[0], keep_codes, keep_codes or shared[1]], alive
    assert experts._kernel_weights[0].data.dtype == torch.uint8  # the packed copy stays
    for fw, ref, share in zip(experts._kernel_weights, refs[1::2], shared):
        assert (fw.scales is ref()) == share


def test_every_reader_of_released_codes_fails_clearly(problem):
    lean = _build(problem, "nvfp4", False)
    qc = lean.quant_config
    for attr in ("codes", "scales", "global_scale", "scale_mode"):
        with pytest.raises(CodesReleasedError, match=rf"w13_q\.{attr}: the unpacked nvfp4 .* released .*{HINT}"):
            getattr(qc.w13_q, attr)
    with pytest.raises(CodesReleasedError, match=rf"unfused experts path \(dequantize_weights\).*{HINT}"):
        lean.experts.dequantize_weights()
    with pytest.raises(CodesReleasedError, match=rf"reference_moe_trace.*{HINT}"):
        hm.reference.reference_moe_trace(problem["x"], problem["lg"], qc, **lean.reference_kwargs())
    with pytest.raises(CodesReleasedError, match=rf"reference_moe_trace.*{HINT}"):
        hm.reference.reference_moe(problem["x"], problem["lg"], qc, top_k=K)
    with pytest.raises(CodesReleasedError, match=rf"certified oracle \(OracleMoE.*{HINT}"):
        OracleMoE(lean)
    with pytest.raises(CodesReleasedError, match=rf"building the fused kernel weights.*{HINT}"):
        hm.make_experts(qc, backend="fused")
    with pytest.raises(CodesReleasedError, match=r"w13_q\.codes"):   # conversion to the kernel format
        FusedWeights.from_quantized(qc.w13_q, qc.w13_gscale)
    OracleMoE(_build(problem, "nvfp4", True))  # kept codes: the oracle builds


def test_unfused_refuses_keep_codes_false(problem):
    msg = r"keep_codes=False needs backend='fused': the unfused backend dequantizes"
    with pytest.raises(ValueError, match=msg):
        _build(problem, "nvfp4", False, backend="unfused")
    qc = hm.build_quant_config("w_mxfp8", problem["w13"], problem["w2"])
    with pytest.raises(ValueError, match=msg):
        hm.make_experts(qc, keep_codes=False)


def test_the_one_decision():
    assert [keep_codes_for(b, o) for b in ("unfused", "fused") for o in (False, True)] == [True, True, False, True]


def test_swapper_passes_keep_codes_false_to_the_builder(problem):
    """Swapper.build (moe-emu on a float model) hands keep_codes=False to the
    builder; with the default it calls the builder exactly as before."""
    from harness.emulation.moe_swap import MoEBlockSpec, Swapper

    seen = []
    spec = MoEBlockSpec("m", "mixtral", torch.zeros(E, H), K, problem["w13"], problem["w2"],
                        options=dict(renormalize=True, scoring="softmax", activation="silu"))
    sw = Swapper(model=None, specs=[spec])
    for keep in (True, False):
        sw.build("w_mxfp4", lambda *a, **kw: seen.append(kw.get("keep_codes", "absent"))
                 or hm.build_emulated_moe(*a, **kw), backend="fused", keep_codes=keep)
        assert sw.built["w_mxfp4"]["m"].emulated.quant_config.codes_released is not keep
    assert seen == ["absent", False]


def assert_same_kernel_weights(got, want, what) -> None:
    """Every tensor field of two FusedWeights: both absent, or the same dtype,
    shape, strides (so the scale bytes' order) and bytes."""
    assert got.scale_order == want.scale_order, what
    for name in FusedWeights.TENSORS:
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), (what, name)
        if b is not None:
            assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride()), (what, name)
            assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)), (what, name)


@pytest.mark.parametrize("k", [H, lc.SHORT_K_MAX + 32])
@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8"])
@pytest.mark.parametrize("chunk_experts", [1, 3, E])
def test_kernel_weights_built_by_experts_are_bitwise_the_whole_build(scheme, chunk_experts, k):
    """The loader's lean path (codes on the host, kernel weights built on the
    device a few experts at a time) holds exactly the tensors of the one-shot
    build: every field bitwise, in every chunking (1 expert, a chunk that does
    not divide E, all at once), and in both scale orders (K = H: "k"; a long
    K loop of 33 or 66 scale bytes a row: "n", launch_config.scale_order)."""
    g = torch.Generator().manual_seed(5)
    q, gs = hm.quantize_expert_weights(torch.randn(E, 2 * I, k, generator=g) * 0.1, scheme)
    assert FusedWeights.from_quantized(q, gs).scale_order == ("k" if k == H else "n")
    per_expert = 2 * I * k
    whole = FusedWeights.from_quantized(q, gs)
    parts = FusedWeights.from_quantized_by_experts(q, gs, "cpu", chunk_bytes=chunk_experts * per_expert)
    assert (parts.kind, parts.fmt, parts.E, parts.N, parts.K) == (whole.kind, whole.fmt, whole.E, whole.N, whole.K)
    assert_same_kernel_weights(parts, whole, scheme)
    empty = hf.QuantizedTensor(q.codes[:0], q.scales[:0], None, q.fmt, q.scale_mode)
    with pytest.raises(ValueError, match=rf"no experts to build \(codes \[0, 64, {k}\]\)"):
        FusedWeights.from_quantized_by_experts(empty, None if gs is None else gs[:0], "cpu")


def test_lean_config_moves_its_scales_and_says_where():
    """without_codes(device): the new config's stand-ins report the device the
    layer runs on and every tensor left in it lives there."""
    g = torch.Generator().manual_seed(6)
    w13, w2 = torch.randn(E, 2 * I, H, generator=g), torch.randn(E, H, I, generator=g)
    moe = hm.build_emulated_moe("nvfp4", w13, w2, top_k=K, a1_gscale=torch.tensor(2.0), a2_gscale=torch.tensor(3.0))
    lean = moe.quant_config.without_codes("meta")
    assert lean.device == torch.device("meta") and lean.w2_q.device == torch.device("meta")
    moved = [n for n in ("w13_gscale", "w2_gscale", "a1_gscale", "a2_gscale") if getattr(lean, n) is not None]
    assert moved and all(getattr(lean, n).is_meta for n in moved)
    assert moe.quant_config.w13_gscale.device.type == "cpu"  # the given config is not written


@pytest.mark.gpu
@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4"])
def test_lean_build_peak_is_the_kernel_format_plus_one_chunk_gpu(gpu_device, scheme):
    """Built from host codes a few experts at a time, the device's peak over the
    build is the finished kernel format plus one chunk's working set (at most 4
    bytes a weight of the chunk: its codes, scales, multipliers, packed bytes),
    far below the whole layer's codes that a build on the device holds."""
    En, N, Kd = 32, 512, 512
    g = torch.Generator().manual_seed(7)
    q, gs = hm.quantize_expert_weights(torch.randn(En, N, Kd, generator=g) * 0.1, scheme)
    chunk = N * Kd  # one expert's codes
    assert 4 * chunk < En * N * Kd // 4  # so the bound below is far under a build holding the layer's codes
    torch.cuda.synchronize(gpu_device)
    base = torch.cuda.memory_allocated(gpu_device)
    torch.cuda.reset_peak_memory_stats(gpu_device)
    fw = FusedWeights.from_quantized_by_experts(q, gs, gpu_device, chunk_bytes=chunk)
    torch.cuda.synchronize(gpu_device)
    final = torch.cuda.memory_allocated(gpu_device) - base
    peak = torch.cuda.max_memory_allocated(gpu_device) - base
    assert final > 0 and peak - final <= 4 * chunk, (peak, final, chunk)
    whole = FusedWeights.from_quantized(
        hf.QuantizedTensor(q.codes.to(gpu_device), q.scales.to(gpu_device), None, q.fmt, q.scale_mode),
        None if gs is None else gs.to(gpu_device))
    assert_same_kernel_weights(fw, whole, scheme)
