"""Activations: the harness' QDQ with the scales it loads from a checkpoint equals
the producer's own fake quantization of that checkpoint's activation spec.

compressed-tensors NVFP4: forward_quantize with the file's input_global_scale
(static global, dynamic "local" block scales) vs the harness' nvfp4 QDQ with the
same scale, bit for bit. The harness runs ONE activation scale per layer input,
the minimum encode-side scale over experts (vLLM's convention, loaders.py);
layer inputs of gate/up carry one value for every expert, down_proj inputs
differ per expert, so the a2 scale is the documented minimum.
Quark MX: hw_emulation fake_quantize_mx with the config's element type, block
and scale_calculation_mode vs the harness scheme's QDQ, bit for bit.
compressed-tensors MXFP4: its dynamic MX activations (scale rounded to the
closest power of two) equal the harness scheme w_mxfp4_a_mxfp4's QDQ (mode
"even") bit for bit, and differ from mode floor (OCP's) on these inputs.
ModelOpt NVFP4 (CUDA only: its fake quantization is a Triton kernel that
asserts a CUDA amax): the input quantizer of NVFP4_DEFAULT_CFG with amax =
input_scale x 6 x 448 (the value its export divided) vs the harness' nvfp4 QDQ
with the encode-side scale its loader derives, 1 / input_scale.
"""
import pytest
import torch

import harness.formats as hf
from harness.checkpoints.files import CheckpointFiles
from harness.checkpoints.load import load_checkpoint
from harness.moe.reference import qdq_activation
from harness.moe.schemes import get_scheme

from suites.checkpoints.producer_checkpoints import made


def _x(seed=0, n=512):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 64, generator=g) * torch.logspace(-3, 1, n).unsqueeze(1)
    return x.to(torch.float32)


def _ct_fake_quant(files, x, gs):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationStatus
    from compressed_tensors.quantization.lifecycle.forward import forward_quantize

    (group,) = files.config["quantization_config"]["config_groups"].values()
    args = QuantizationArgs(**group["input_activations"])
    mod = torch.nn.Module()
    mod.quantization_status = QuantizationStatus.FROZEN
    if gs is not None:
        mod.input_global_scale = torch.nn.Parameter(gs.reshape(1).clone(), requires_grad=False)
    return forward_quantize(mod, x, "input", args)


def test_compressed_tensors_nvfp4_activations():
    folder = made("llmcompressor", "nvfp4")
    files = CheckpointFiles(folder)
    loaded = load_checkpoint(folder)
    x = _x()
    for block, qc in loaded.quant_configs.items():
        t = loaded.tensors[block]
        a13, a2 = t["w13_input_global_scale"], t["w2_input_global_scale"]
        assert torch.equal(a13, a13.flatten()[0].expand_as(a13))        # one value for every expert
        assert float(qc.a1_gscale) == float(a13.min()) and float(qc.a2_gscale) == float(a2.min())
        for gs in (a13.flatten()[0], *a2.unique()):
            got = qdq_activation(x, "nvfp4", gscale=gs)
            assert torch.equal(got, _ct_fake_quant(files, x, gs)), (block, float(gs))


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2"])
def test_quark_mx_activations(scheme):
    folder = made("quark", scheme)  # skips, with the reason, when amd-quark is absent
    from quark.torch.kernel.hw_emulation import hw_emulation_interface as hw

    files = CheckpointFiles(folder)
    loaded = load_checkpoint(folder)
    spec = files.config["quantization_config"]["global_quant_config"]["input_tensors"]
    x = _x(1)
    want = hw.fake_quantize_mx(x.clone(), axis=-1, block_size=spec["group_size"],
                               scale_calculation_mode=spec["scale_calculation_mode"], mx_element_dtype=spec["dtype"])
    assert torch.equal(qdq_activation(x, loaded.scheme), want)


def test_compressed_tensors_mxfp4_activations():
    folder = made("llmcompressor", "mxfp4")
    files = CheckpointFiles(folder)
    x = _x(2)
    ct = _ct_fake_quant(files, x, None)
    scheme = get_scheme(load_checkpoint(folder).scheme)
    assert torch.equal(qdq_activation(x, scheme), ct)
    assert not torch.equal(hf.qdq(x, "mxfp4", scale_mode="floor", rounding="rne"), ct)  # the mode matters here


def _modelopt_input_fake_quant(x, input_scale):
    import modelopt.torch.quantization as mtq
    from modelopt.torch.quantization.config import QuantizerAttributeConfig
    from modelopt.torch.quantization.nn import TensorQuantizer

    (cfg,) = [e["cfg"] for e in mtq.NVFP4_DEFAULT_CFG["quant_cfg"] if e.get("quantizer_name") == "*input_quantizer"]
    tq = TensorQuantizer(QuantizerAttributeConfig(**cfg), amax=float(input_scale * (6.0 * 448.0))).to(x.device)
    return tq(x)


# ModelOpt decodes on the decode side: fl(q x fl(e4m3 x g)) with g = fl(amax / 2688); the
# harness encodes with gs = fl(1 / input_scale) and decodes fl(q x fl(s / gs)). With the same code q
# and scale byte the two products are one value carried through different roundings: at most five
# (1/input_scale, s/gs; x 2688, / 2688, s x g) plus one per final product, each <= 2^-24
# relative, so they agree within 7 x 2^-24 < 2^-21. A different code or scale byte moves a value
# by at least 1/8 (an e4m3 step) and lands far outside that bound.
DECODE_SIDE_RTOL = 2.0 ** -21


def _compare_modelopt(x, got, want, label) -> dict:
    diff = (got - want).abs()
    same = got.view(torch.int32) == want.view(torch.int32)
    far = diff > DECODE_SIDE_RTOL * want.abs()
    stats = {"elements": got.numel(), "bitwise_equal": int(same.sum()), "within_decode_rounding": int((~same & ~far).sum()),
             "far": int(far.sum())}
    if far.any():
        idx = far.flatten().nonzero().flatten()[:6].tolist()
        amax = x.reshape(-1, 16).abs().amax(dim=1).repeat_interleave(16)
        ex = [(float(x.flatten()[i]), float(got.flatten()[i]), float(want.flatten()[i]), float(amax[i])) for i in idx]
        pytest.fail(f"{label}: {stats}; (x, harness, modelopt, block amax): {ex}")
    return stats


@pytest.mark.cuda
def test_modelopt_nvfp4_activations():
    folder = made("modelopt", "nvfp4")
    loaded = load_checkpoint(folder)
    x = _x(3).cuda()
    totals = {}
    for block, qc in loaded.quant_configs.items():
        t = loaded.tensors[block]
        scales = torch.cat([t["w13_input_scale"].flatten(), t["w2_input_scale"].flatten()]).unique()
        assert float(qc.a1_gscale) == float(hf.global_scale_from_modelopt(t["w13_input_scale"]).min())
        for a in scales:
            a = a.cuda()
            want = _modelopt_input_fake_quant(x, a)
            got = qdq_activation(x, "nvfp4", gscale=hf.global_scale_from_modelopt(a))
            for k, v in _compare_modelopt(x, got, want, f"{block} input_scale {float(a)!r}").items():
                totals[k] = totals.get(k, 0) + v
    print(f"modelopt vs harness nvfp4 activations: {totals}")
    assert totals["elements"] >= 2 * len(loaded.quant_configs) * x.numel()
    assert totals["bitwise_equal"] > 0
