"""GPU-only MoE properties (marked `gpu`: skipped cleanly without a GPU).

* CUDA graph: capture the whole FusedMoE forward, replay; replay and eager
  both within the derived float64-reference tolerance (normally bitwise equal;
  cuBLAS may choose another algorithm on the capture stream, so bitwise is not
  the contract); the eager forward and the captured
  forward run under torch.cuda.set_sync_debug_mode("error"), so any host sync
  raises (the mode is switched on inside the capture context, because entering
  and leaving torch.cuda.graph synchronizes by itself).
  New input values are copied into the static buffers before a second replay,
  so a graph that baked its inputs in is caught too.
* torch.compile(fullgraph=True): no graph break anywhere in the forward; the
  compiled output lies within the derived float64-reference tolerance (not
  bitwise: inductor may fuse and reorder float32 arithmetic), with the fused
  kernel's c_prec where it applies.
* The float64-reference property on the GPU, both backends (the fused kernel
  in bf16 precision uses its documented c_prec = 2^-7 for lossy operands).
CPU proxies of the first two run in test_moe_structure.py (no_host_work) and
in suites/regressions (pr40033, pr46735).
"""
import contextlib
import dataclasses

import pytest
import torch

from hypothesis import given
from hypothesis import strategies as st

from harness.moe.arch import FAMILIES, ROUTING_ROWS
from harness.moe.graphs import capture_forward
from harness.moe.schemes import SCHEME_NAMES
from harness.strategies import moe_problems
from harness.testing.checks.stages import check_stages
from harness.testing.checks import problem as pb
from harness.testing.checks.device import check_buffers_follow_weights, check_conversion_every_backend, check_create_weights_every_scheme
from harness.testing.checks.offsets import check_fused_large_offsets
from harness.testing.checks.oracle import check_matches_reference, fused_c_prec
from harness.strategies import MoEProblem
from harness.schemes import EXPERT_BACKENDS

pytestmark = pytest.mark.gpu
BACKENDS = EXPERT_BACKENDS
FEATURED = tuple(n for n, a in FAMILIES.items()
                 if a.grouped or a.score_correction or a.router_weight_on_input or a.expert_bias
                 or a.shared_experts or a.scoring == "softmax_topk")


def _problem(scheme, T=12, seed=5):
    return MoEProblem(scheme, 8, 2, 64, 64, T, seed, ckpt="compressed_tensors" if scheme == "nvfp4" else "native",
                      logits="ties", spread=2)


@contextlib.contextmanager
def sync_debug_error():
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


@pytest.fixture(autouse=True)
def _ieee_fp32_matmul():
    """The derived tolerances assume IEEE float32 GEMMs in the unfused path:
    TF32 off for the duration of each test (restored after)."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old[0]
        torch.set_float32_matmul_precision(old[1])


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_graph_replay_equals_eager(scheme, backend):
    p = _problem(scheme)
    t, _, cfg, moe = pb.setup(p, backend=backend, device="cuda")
    x, logits = t.hidden.clone(), t.router_logits.clone()
    c = fused_c_prec(moe, x.device) if backend == "fused" else 0.0
    with torch.no_grad():
        moe(x, logits)  # warm-up: Triton compilation, lazy caches
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            moe(x, logits)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with sync_debug_error():
            eager = moe(x, logits)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            # Inside the capture only: torch.cuda.graph() itself synchronizes on
            # entry and exit, which sync-debug "error" would flag.
            with sync_debug_error():
                static_out = moe(x, logits)
        graph.replay()
        torch.cuda.synchronize()
        # Same kernels on the same inputs: normally bitwise equal. cuBLAS may pick
        # another algorithm on the capture stream (other workspace), so the
        # contract is the derived reference tolerance, on both outputs.
        check_matches_reference(p, t, cfg, moe, out=static_out.clone(), c_prec=c)
        check_matches_reference(p, t, cfg, moe, out=eager, c_prec=c)
        # New values in the static inputs: the replay must follow them (a graph
        # that baked its inputs or a host-computed scale in would not).
        p2 = p.replace(seed=6)
        t2 = p2.tensors()
        x.copy_(t2.hidden.to(x.device))
        logits.copy_(t2.router_logits.to(x.device))
        graph.replay()
        torch.cuda.synchronize()
        t2c = dataclasses.replace(t2, hidden=x, router_logits=logits)
        check_matches_reference(p2, t2c, cfg, moe, out=static_out.clone(), c_prec=c)


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_fullgraph_equals_eager(scheme, backend):
    torch._dynamo.reset()
    p = _problem(scheme)
    t, _, cfg, moe = pb.setup(p, backend=backend, device="cuda")
    with torch.no_grad():
        eager = moe(t.hidden, t.router_logits)
        compiled = torch.compile(moe, fullgraph=True)
        out = compiled(t.hidden, t.router_logits)
    c = fused_c_prec(moe, t.hidden.device) if backend == "fused" else 0.0
    check_matches_reference(p, t, cfg, moe, out=out, c_prec=c)
    check_matches_reference(p, t, cfg, moe, out=eager, c_prec=c)


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_gpu_emulation_matches_reference(scheme, backend, seed):
    p = MoEProblem(scheme, 16, 4, 128, 64, 64, seed, ckpt="modelopt" if scheme == "nvfp4" else "native",
                   logits="extreme", spread=6, token_spread=12)
    t, _, cfg, moe = pb.setup(p, backend=backend, device="cuda")
    out = pb.run(moe, t)
    c = fused_c_prec(moe, t.hidden.device) if backend == "fused" else 0.0
    check_matches_reference(p, t, cfg, moe, out=out, c_prec=c)


@pytest.mark.parametrize("routing", tuple(ROUTING_ROWS))
@pytest.mark.parametrize("backend", BACKENDS)
@pb.examples(1 / 4)
@given(data=st.data())
def test_gpu_routing_rows_match_reference(routing, backend, data):
    """The families' features (every routing row; biases, shared MLP, both
    activations drawn; every scheme) against the float64 reference on the GPU."""
    p = data.draw(moe_problems(routings=(routing,), max_experts=32, max_tokens=128), label="problem")
    t, _, cfg, moe = pb.setup(p, backend=backend, device="cuda")
    out = pb.run(moe, t)
    c = fused_c_prec(moe, t.hidden.device) if backend == "fused" else 0.0
    check_matches_reference(p, t, cfg, moe, out=out, c_prec=c)
    check_stages(p, t, cfg, moe, c_prec=c)


@pytest.mark.parametrize("family", FEATURED)
@pytest.mark.parametrize("scheme", ("nvfp4", "w_mxfp4", "w_mxfp4_a_fp8"))
@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_family_cuda_graph_and_compile(family, scheme, backend):
    """A family's layer (correction bias, groups, weight on input, biases,
    shared MLP) captured in a CUDA graph with no host sync, and compiled with
    fullgraph=True; both within the reference tolerance."""
    p = pb.family_problem(family, scheme, T=12, logits="ties")
    t, _, cfg, moe = pb.setup(p, backend=backend, device="cuda")
    x, logits = t.hidden.clone(), t.router_logits.clone()
    c = fused_c_prec(moe, x.device) if backend == "fused" else 0.0
    with torch.no_grad():
        moe(x, logits)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            moe(x, logits)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            with sync_debug_error():
                static_out = moe(x, logits)
        graph.replay()
        torch.cuda.synchronize()
        check_matches_reference(p, t, cfg, moe, out=static_out.clone(), c_prec=c)
        torch._dynamo.reset()
        out = torch.compile(moe, fullgraph=True)(x, logits)
        torch._dynamo.reset()
    check_matches_reference(p, t, cfg, moe, out=out, c_prec=c)


@pytest.mark.parametrize("scheme", SCHEME_NAMES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_buffers_follow_weights(scheme, backend):
    _, _, _, moe = pb.setup(_problem(scheme), backend=backend, device="cuda")
    assert check_buffers_follow_weights(moe)["device"].startswith("cuda")


def test_gpu_conversion_and_weight_creation_every_backend():
    check_conversion_every_backend(device="cuda")
    check_create_weights_every_scheme(device="cuda")


def test_fused_large_offsets_gpu():
    assert check_fused_large_offsets("cuda")["max_offset"] > 2**31


@pytest.mark.parametrize("activation", ["silu", "swiglu_clamp"])
def test_fused_activation_is_bitwise_torch(activation):
    """The fused backend's one-pass activations (silu_and_mul, gpt-oss's
    clamped SwiGLU) give torch's bits exactly: random rows over a wide
    exponent range plus the edges (+-0, +-Inf, NaN, exp overflow at large
    negative gates, subnormals, float32 max, the clamp bounds and their
    neighbours)."""
    from harness.kernels import fused_act
    from harness.moe import activations

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(7)
    P, inter = 257, 1536
    h = torch.randn(P, 2 * inter, generator=g, device=dev)
    h *= torch.exp2(torch.randint(-30, 30, (P, 2 * inter), generator=g, device=dev).float())
    h[3:100] = torch.randn(97, 2 * inter, generator=g, device=dev) * 6  # around the clamp of +-7
    lim = torch.tensor(7.0)
    edge = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), -100.0, -88.8, 88.8, 1e-40, -1e-40,
                         3.4e38, -3.4e38, 1e-45, 20.0, -20.0, 0.5, 7.0, -7.0, float(torch.nextafter(lim, lim + 1)),
                         float(torch.nextafter(lim, lim - 1)), -float(torch.nextafter(lim, lim + 1))], device=dev)
    h[0, : edge.numel()] = edge
    h[1, inter: inter + edge.numel()] = edge
    h[2, : edge.numel()] = edge
    h[2, inter: inter + edge.numel()] = edge.flip(0)
    kernel = fused_act.ACTIVATIONS[activation]
    want = activations.get_activation(activation)(h)
    got = kernel(h)
    same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
    assert bool(same.all()), f"{int((~same).sum())} of {same.numel()} elements differ, first at {(~same).nonzero()[:3].tolist()}"
    compiled = torch.compile(kernel, fullgraph=True)
    assert torch.equal(compiled(h[:8]).view(torch.int32), got[:8].view(torch.int32))
    # bf16 out: the float32 result rounded once (the next GEMM's operand), NaN payloads aside
    got16, want16 = kernel(h, torch.bfloat16), want.to(torch.bfloat16)
    same = (got16.view(torch.int16) == want16.view(torch.int16)) | (got16.isnan() & want16.isnan())
    assert got16.dtype == torch.bfloat16 and bool(same.all()), int((~same).sum())
    with pytest.raises(ValueError, match="writes float32 or bfloat16"):
        kernel(h, torch.float16)


@pytest.mark.parametrize("family,scheme", [("qwen3", "w_mxfp4"), ("gpt_oss", "w_mxfp4"),
                                           ("qwen3", "w_mxfp4_a_mxfp4"), ("gpt_oss", "w_mxfp4_a_mxfp6_e2m3"),
                                           ("qwen3", "nvfp4"), ("gpt_oss", "nvfp4")])
def test_bf16_handoffs_change_no_bit(family, scheme):
    """A fused layer at precision "bf16" hands its GEMMs bf16 tensors: the
    bf16 hidden as is (w_mxfp4) or its MX QDQ computed in bf16 (the MX
    activation schemes), silu rounded in its own pass where no QDQ follows,
    nvfp4's QDQs written as bf16(x_qdq * gs_a) from the bf16 hidden and the
    float32 activation; with the debug trace on it keeps the float32
    intermediates and converts in the GEMM (nvfp4: scale_to_bf16). Both give
    the same output bits, in eager mode and from a CUDA graph."""
    import harness.moe as hm

    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(3)
    E, H, I, T, k = 8, 256, 128, 24, 2
    w13, w2 = torch.randn(E, 2 * I, H, generator=g) * 0.05, torch.randn(E, H, I, generator=g) * 0.05
    kw = {}
    if family == "gpt_oss":
        kw = dict(w13_bias=torch.randn(E, 2 * I, generator=g), w2_bias=torch.randn(E, H, generator=g))
    if scheme == "nvfp4":  # encode-side activation scales, 448 * 6 / amax (x's amax about 9; a2's below)
        kw.update(a1_gscale=torch.tensor(448 * 6 / 9.0), a2_gscale=torch.tensor(448 * 6 / 3.0))
    moe = hm.build_emulated_moe(scheme, w13.to(dev), w2.to(dev), top_k=k, backend="fused",
                                activation="swiglu_clamp" if family == "gpt_oss" else "silu",
                                **{n: t.to(dev) for n, t in kw.items()})
    x = (torch.randn(T, H, generator=g) * 2).to(dev, torch.bfloat16)
    lg = torch.randn(T, E, generator=g).to(dev)
    assert moe.experts._precision(dev) == "bf16"
    fast = moe(x, lg)
    moe.experts.trace = {}
    slow = moe(x, lg)
    assert moe.experts.trace["a1"].dtype == torch.float32
    moe.experts.trace = None
    assert torch.equal(fast.view(torch.int16), slow.view(torch.int16))
    replay, _ = capture_forward(moe, x.clone(), lg.clone())
    assert torch.equal(replay().view(torch.int16), fast.view(torch.int16))


@pytest.mark.parametrize("k", [1, 2, 4, 8, 11])  # 11: past the kernel's unrolled slots
def test_fused_topk_sum_is_bitwise_the_slot_order_sum(k):
    """The fused top-k sum (one pass: k adds and the cast) gives the bits of
    harness.moe.combine.topk_sum on the device, for float32, bf16 and fp16
    outputs: a wide exponent range, signed zeros, +-Inf, NaN, subnormals,
    float32 max (overflow), and slots whose order changes the sum."""
    from harness.kernels import fused_act
    from harness.moe import combine

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(11)
    T, H = 37, 2880 + 3  # H past a multiple of the kernel's block
    h = torch.randn(T * k, H, generator=gen, device=dev)
    h *= torch.exp2(torch.randint(-140, 120, h.shape, generator=gen, device=dev).float())
    edge = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40, -1e-45, 3.4e38, 1.0,
                         2.0 ** 24, -(2.0 ** 24), 65504.0], device=dev)
    for j in range(k):  # slot j of tokens 0..2 takes the edges rotated by j
        h[j, : edge.numel()] = edge.roll(j)
        h[k + j, : edge.numel()] = -edge.roll(2 * j)
        h[2 * k + j, : edge.numel()] = edge.flip(0).roll(j)
    for out_dtype in fused_act.SUM_DTYPES:
        want = combine.topk_sum(h.reshape(T, k, H), out_dtype)
        got = fused_act.topk_sum(h, k, out_dtype)
        bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[out_dtype]
        same = (got.view(bits) == want.view(bits)) | (got.isnan() & want.isnan())
        assert got.dtype == out_dtype and bool(same.all()), (out_dtype, int((~same).sum()))
    with pytest.raises(ValueError, match="dividing its rows"):
        fused_act.topk_sum(h[:-1], T * k, torch.float32)  # T k - 1 rows


def test_fused_scale_to_bf16_is_bitwise_torch():
    """nvfp4's x * gs_a rounded to bf16 in one pass == (x * g).to(bfloat16),
    over a wide exponent range, signed zeros, subnormals, bf16 overflow and
    ties of the bf16 rounding (NaN payloads are not compared)."""
    from harness.kernels import fused_act

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(9)
    x = torch.randn(1000, 333, generator=gen, device=dev)
    x *= torch.exp2(torch.randint(-140, 120, x.shape, generator=gen, device=dev).float())
    x[0, :6] = torch.tensor([0.0, -0.0, 3.3e38, -1e-45, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8], device=dev)
    for g in (1.0, 448.0 * 6 / 3.1, 2.0 ** -20, 1e30):
        gt = torch.tensor(g, device=dev)
        want = (x * gt).to(torch.bfloat16)
        got = fused_act.scale_to_bf16(x, gt)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), g


def test_per_tensor_fp8_qdq_on_device_is_bitwise_the_reference():
    """Dynamic per-tensor E4M3 QDQ (w_mxfp4_a_fp8's activations) on the GPU equals
    the CPU reference bit for bit. torch's CUDA division by a Python scalar is a
    multiply by its float32 reciprocal, so s = amax / 448 written that way comes
    out fl(amax * fl(1/448)), 1 ulp off for some amax; the certified kl_oracle
    gate sees it on an H200 (a1 codes differ in 17,608 of 1.97M tokens)."""
    from harness.moe import ops
    import harness.formats as hf
    from harness.moe.reference import _qdq_per_tensor

    g = torch.Generator().manual_seed(0)
    mismatched = 0
    for i in range(256):
        x = torch.randn(16, 64, generator=g) * torch.exp2(torch.randint(-20, 21, (), generator=g).float())
        got = ops.e4m3_qdq_per_tensor(x.cuda(), None).cpu()
        want = _qdq_per_tensor(x, None, hf.E4M3)
        mismatched += int(not torch.equal(got.view(torch.int32), want.view(torch.int32)))
    assert mismatched == 0, f"{mismatched} of 256 tensors differ from the reference"


@pytest.mark.parametrize("T", [1, 4, 16])
def test_decode_layer_with_tied_router_logits_replays_bitwise(T):
    """A fused layer at decode sizes whose router logits tie everywhere (the
    top-k kernel's ties, experts with many pairs, the layout kernel's
    blocks) gives the same bits from a CUDA graph as eagerly."""
    import harness.moe as hm
    from harness.kernels import moe_align, topk

    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(11)
    E, H, I, k = 64, 256, 128, 8
    w13, w2 = torch.randn(E, 2 * I, H, generator=g) * 0.05, torch.randn(E, H, I, generator=g) * 0.05
    moe = hm.build_emulated_moe("w_mxfp4", w13.to(dev), w2.to(dev), top_k=k, backend="fused")
    x = torch.randn(T, H, generator=g).to(dev, torch.bfloat16)
    lg = (torch.randint(-3, 3, (T, E), generator=g).float() / 2).to(dev)
    assert topk.applies(E, k) and moe_align.applies(T * k, E)
    one = moe(x, lg)
    replay, _ = capture_forward(moe, x.clone(), lg.clone())
    assert torch.equal(replay().view(torch.int16), one.view(torch.int16))


def test_a_capture_of_temporaries_replays_on_its_inputs():
    """capture_forward handed inputs no caller holds (clones passed straight in, as the bench and the A/B tools
    do): after the caller allocates tensors of the inputs' sizes, filled with other values (what would take the
    freed inputs' memory), every replay still gives the eager bits of the inputs it was captured on (the fused
    backend: its graph replays are bitwise its eager forward)."""
    import harness.moe as hm

    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(12)
    E, H, I, T, k = 16, 256, 128, 64, 4
    w13, w2 = torch.randn(E, 2 * I, H, generator=g) * 0.05, torch.randn(E, H, I, generator=g) * 0.05
    moe = hm.build_emulated_moe("w_mxfp4", w13.to(dev), w2.to(dev), top_k=k, backend="fused")
    x = torch.randn(T, H, generator=g).to(dev, torch.bfloat16)
    lg = torch.randn(T, E, generator=g).to(dev)
    with torch.no_grad():
        one = moe(x, lg)
        replay, _ = capture_forward(moe, x.clone(), lg.clone())
        outs = [replay().clone()]
        others = [torch.full_like(x, 7.0), torch.full_like(lg, -3.0), torch.full_like(x, -5.0)]
        outs += [replay().clone() for _ in range(2)]
    assert all(float(o.abs().max()) > 0 for o in others)
    for i, o in enumerate(outs):
        assert torch.equal(o.view(torch.int16), one.view(torch.int16)), f"replay {i}"


_BAD_ID_SCRIPT = """
import sys, torch
from harness.moe.layer import build_emulated_moe
backend, bad = sys.argv[1], int(sys.argv[2])
g = torch.Generator().manual_seed(0)
E, H, I, T, k = 8, 64, 64, 4, 2
moe = build_emulated_moe("w_mxfp4", (torch.randn(E, 2 * I, H, generator=g) * 0.1).cuda(),
                         (torch.randn(E, H, I, generator=g) * 0.1).cuda(), top_k=k, backend=backend)
x = torch.randn(T, H, generator=g).cuda()
ids = torch.randint(0, E, (T, k), generator=g).cuda()
ids[T - 1, k - 1] = bad
out = moe.experts.apply(x, torch.full((T, k), 0.5, device="cuda"), ids)
torch.cuda.synchronize()
print("computed", float(out.float().abs().sum()))
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [8, -1])
def test_eager_apply_fails_on_an_id_outside_the_experts(backend, bad):
    """An expert id outside [0, E) stops an eager CUDA forward with a device-side assert (no host sync, so
    sync-debug "error" forward tests stay green); in a child process, as the assert ends its CUDA context.
    The same script with an id in range computes, so the failure is the id's."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])

    def run(b):
        return subprocess.run([sys.executable, "-c", _BAD_ID_SCRIPT, backend, str(b)], cwd=root,
                              capture_output=True, text=True, timeout=600)
    r = run(bad)
    assert r.returncode != 0 and "computed" not in r.stdout, f"an id {bad} of 8 experts computed: {r.stdout}"
    assert "device-side assert" in r.stderr or "outside [0, 8)" in r.stderr, r.stderr[-2000:]
    ok = run(7)
    assert ok.returncode == 0 and "computed" in ok.stdout, ok.stderr[-2000:]
