"""The memory model's expert term (shapes.Shape.expert_layer_bytes, which
memory_model.per_device sums) against what a built layer holds: every tensor
reachable from the FusedMoE (its experts, their quant config, kernel weights,
scales copied onto the experts), each storage counted once, for layers that
keep their unpacked codes and layers that released them (keep_codes=False)."""

import dataclasses

import pytest
import torch

import harness.moe as hm
from harness.emulation import memory_model, synthetic_loader
from harness.emulation.parallel import iter_tensors
from harness.kernels import launch_config as lc
from harness.kernels.launch_config import SHORT_K_MAX
from harness.models.shapes import SHAPES
from harness.schemes import get_scheme

pytestmark = pytest.mark.usefixtures("one_thread")


def resident_bytes(module) -> int:
    """Bytes of the unique storages of every tensor `module` holds."""
    held = {}
    for _, t in iter_tensors(module):
        st = t.untyped_storage()
        held[st.data_ptr()] = st.nbytes()
    return sum(held.values())


def activation_scale_bytes(qc) -> int:
    """The scalar activation scales (a1/a2 scale or global scale), the one thing
    the paper figure leaves out: 4 B each, at most 16 B a layer."""
    return sum(4 for n in ("a1_scale", "a1_gscale", "a2_scale", "a2_gscale") if getattr(qc, n) is not None)


# (scheme, fused precision): two-level in both precisions (one kernel format serves both; built, not run),
# MX with MX activations, and a weight-only row whose kernel format is the code tensor itself
CASES = [("nvfp4", "ieee"), ("nvfp4", "bf16"), ("w_mxfp4_a_mxfp4", "ieee"), ("w_mxfp8", "ieee")]


# the tiny Qwen3 shape, and the same with a hidden size whose w13 scale rows the kernel stores in its own order
# (launch_config.scale_order "n": a long K loop, 33 or 66 scale bytes a row), a copy the model counts
TINY = SHAPES["tiny-qwen3-moe"]
LAYER_SHAPES = {"tiny-qwen3-moe": TINY, "wide-hidden": dataclasses.replace(TINY, hidden=SHORT_K_MAX + 32)}


@pytest.mark.parametrize("shape", LAYER_SHAPES)
@pytest.mark.parametrize("scheme, precision", CASES)
@pytest.mark.parametrize("backend, keep_codes", [("unfused", True), ("fused", True), ("fused", False)])
def test_resident_bytes_are_the_paper_figure(scheme, precision, backend, keep_codes, shape):
    s = LAYER_SHAPES[shape]
    if shape == "wide-hidden":
        assert s.reordered_scale_bytes_per_layer(16) > 0 and s.reordered_scale_bytes_per_layer(32) > 0
    else:
        assert s.reordered_scale_bytes_per_layer(16) == s.reordered_scale_bytes_per_layer(32) == 0
    if backend == "unfused" and precision != "ieee":
        pytest.skip("the precision is a fused-backend setting")
    g = torch.Generator().manual_seed(0)
    w13 = torch.randn(s.experts, 2 * s.moe_intermediate, s.hidden, generator=g)
    w2 = torch.randn(s.experts, s.hidden, s.moe_intermediate, generator=g)
    moe = hm.build_emulated_moe(scheme, w13, w2, top_k=s.top_k, backend=backend, fused_precision=precision,
                                keep_codes=keep_codes, a1_gscale=torch.tensor(1.0), a2_gscale=torch.tensor(1.0))
    del w13, w2
    row = get_scheme(scheme)
    spec = row.weight_spec
    want = s.expert_layer_bytes(spec.block_size, fused=backend == "fused", fp4=spec.is_fp4, keep_codes=keep_codes)
    assert resident_bytes(moe) == want + activation_scale_bytes(moe.quant_config), (scheme, precision, backend)


def test_released_term_on_paper():
    """What keep_codes=False saves per weight: 1 B of fp4 codes (the scale
    bytes stay: the kernel reads them); the memory model's per-device weights
    drop by exactly that, and the lean fused layer holds the checkpoint's
    bytes: 0.5 B a weight plus a scale byte a block (plus the global scales)."""
    s = SHAPES["mixtral-8x22b"]
    n = s.expert_params_per_layer
    assert s.released_expert_bytes_per_layer(16) == n
    assert s.released_expert_bytes_per_layer(32, fp4=False) == 0
    assert s.expert_layer_bytes(16, fused=True, keep_codes=False) == n // 2 + n // 16 + 2 * 4 * s.experts
    assert s.expert_layer_bytes(32, fused=True, keep_codes=False) == n // 2 + n // 32
    dm = synthetic_loader.device_map_for(s.hf_config(), ["cuda:0"])
    keep = memory_model.per_device(s, "nvfp4", dm, 1, 16, backend="fused")["cuda:0"]["weights"]
    lean = memory_model.per_device(s, "nvfp4", dm, 1, 16, backend="fused", keep_codes=False)["cuda:0"]["weights"]
    assert keep - lean == s.layers * n
    with pytest.raises(ValueError, match="keep_codes=False needs the fused backend"):
        memory_model.per_device(s, "nvfp4", dm, 1, 16, backend="unfused", keep_codes=False)


def test_read_past_k_kernel_format_on_paper():
    """The model's kernel-format term with e2m1 words in the "mma" order
    (MX on CUDA, mma=True): a hidden size of 2080 (K >= LONG_K_MIN, not a
    multiple of 256) is read to 2304 for w13, with its own scale bytes and
    the slack a read of its last row past K reaches; the FusedWeights built
    so (on the CPU, word order "mma") hold exactly the term plus the scale
    bytes they share with the config. gpt-oss-120b's kernel format on CUDA
    holds the checkpoint's bytes and 52032 bytes of slack a layer, and the
    model on a CUDA device counts them (memory_model.per_device)."""
    from harness.kernels.fused_weights import FusedWeights
    from harness.moe import quantize_expert_weights

    s = dataclasses.replace(TINY, hidden=2080)
    tensors = s.expert_tensors(mma=True)
    assert [(n, k, kp) for _, n, k, kp in tensors] == [(2 * s.moe_intermediate, 2080, 2304),
                                                      (2080, s.moe_intermediate, s.moe_intermediate)]
    g = torch.Generator().manual_seed(0)
    held = shared = 0
    for count, n, k, kp in tensors:
        q, _ = quantize_expert_weights(torch.randn(count, n, k, generator=g), "w_mxfp4")
        fw = FusedWeights.from_quantized(q, None, word_order="mma")
        assert fw.k_read == kp
        held += fw.nbytes()
        if fw.scales.data_ptr() == q.scales.data_ptr():
            shared += q.scales.numel()
    assert held == s.kernel_expert_bytes_per_layer(32, mma=True) + shared
    assert s.kernel_expert_bytes_per_layer(32, mma=True) > s.kernel_expert_bytes_per_layer(32)
    # w13's scale rows (65 bytes) are stored in order "n" either way: the config's copy is released either way
    assert s.released_expert_bytes_per_layer(32, mma=True) == s.released_expert_bytes_per_layer(32)
    oss = SHAPES["gpt-oss-120b"]
    # w13 [5760, 2880] and w2 [2880, 2880], read to 3072: the last row's 96 code bytes, and 6 blocks of N scale
    # bytes each (order "n", rows of 90 bytes)
    assert oss.kernel_expert_bytes_per_layer(32, mma=True) - oss.kernel_expert_bytes_per_layer(32) == (
        96 + 6 * 5760 + 96 + 6 * 2880) == 52032
    dm = synthetic_loader.device_map_for(oss.hf_config(), ["cuda:0"])
    cuda = memory_model.per_device(oss, "w_mxfp4", dm, 1, 16, backend="fused")["cuda:0"]["weights"]
    assert memory_model.mma_words("mxfp4") == (lc.vendor_of("cuda") == "cuda") and not memory_model.mma_words("nvfp4")
    assert cuda == oss.emulated_bytes(32, fused=True, mma=memory_model.mma_words("mxfp4"))
