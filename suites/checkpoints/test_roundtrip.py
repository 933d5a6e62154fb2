"""Every producer x scheme: the checkpoint is read as the producer wrote it and
the weights the harness' MoE layer uses equal the producer's own
dequantization bit for bit (ModelOpt: the documented <= 3 ulp convention
bound, harness/checkpoints/roundtrip.py), the checkpoint was made from the
row's float model (non-expert tensors identical, experts close, biases
equal), and made.json records the producer versions."""
import json

import pytest
import torch

import harness.formats as hf
from harness.checkpoints import cache, float_experts, producers
from harness.models import source
from harness.checkpoints.completeness import expert_count, sparse_layers
from harness.checkpoints.files import CheckpointFiles
from harness.checkpoints.load import base_mismatches, load_checkpoint
from harness.checkpoints.make import source_dir
from harness.checkpoints.roundtrip import roundtrip

from suites.checkpoints.producer_checkpoints import made

# relative Frobenius error of the producer's dequantized experts vs the float weights:
# fp4 measured 0.098 (nvfp4) / 0.120 (mxfp4); mxfp6 and mxfp8 smaller. A checkpoint whose
# experts were re-initialised instead of loaded (seen when two producers shared a process) gives ~1.4.
SOURCE_REL_ERR_MAX = 0.2


def _expected_results(config: dict, base) -> int:
    """MoE layers x experts x (gate, up, down), x 2 when the float model has
    per-expert biases (their gate, up and down parts are compared too)."""
    layers, _ = sparse_layers(config, "config.json")
    E, _ = expert_count(config, "config.json")
    biased = any(fe.has_bias for fe in float_experts.read_folder(base)[2].values())
    return len(layers) * E * 3 * (2 if biased else 1)


def test_roundtrip(case):
    producer, scheme, folder = case
    rt = roundtrip(folder, base_dir=source_dir(producer))
    assert rt.scheme == producers.harness_scheme(producer, scheme)
    assert rt.fmt == producers.get(producer).fmt
    want = _expected_results(json.loads((folder / "config.json").read_text()), source_dir(producer))
    assert len(rt.results) == want, rt.summary()
    assert rt.ok, rt.summary()
    if rt.bound_ulp is None:
        assert all(r.differing == 0 for r in rt.results), rt.summary()
    weights = [r.source_rel_err for r in rt.results if not r.name.endswith("_bias")]
    worst = max(weights)
    assert worst < SOURCE_REL_ERR_MAX, f"{rt.summary()}: experts differ from the float model by {worst}"
    biases = [r for r in rt.results if r.name.endswith("_bias")]
    assert all(r.source_rel_err == 0 for r in biases), "biases are stored unquantized: equal to the float model's"


def test_made_from_its_float_model(case):
    producer, scheme, folder = case
    base = source_dir(producer)
    ckpt_keys = set(CheckpointFiles(folder).keys())
    # the one float tensor a producer may replace: a shared expert's weight, which it quantizes like the
    # routed experts' (test_family_checkpoints.py proves it read bit for bit into the layer): renamed
    # weight_packed (compressed-tensors), or kept as `weight` beside its block scales (ModelOpt)
    def quantized(k):
        stem = k[:-len("weight")]
        return (k not in ckpt_keys and stem + "weight_packed" in ckpt_keys) or \
            (k in ckpt_keys and stem + "weight_scale" in ckpt_keys)

    quantized_shared = [k for k in base_mismatches(folder, base)
                        if ".shared_expert" in k and k.endswith(".weight") and quantized(k)]
    assert base_mismatches(folder, base) == quantized_shared
    m = json.loads((folder / cache.MARKER).read_text())
    assert m["versions"] == producers.versions(producers.get(producer))
    assert m["model_hash"] == source.model_hash(base) and m["scheme"] == scheme


def test_modelopt_difference_is_only_the_multiplier():
    """ModelOpt's dequantization with the harness' block multiplier fl(s / fl(1/ws2))
    in place of its fl(s * ws2) is the harness' weight bit for bit: the multiplier is
    the whole convention difference, and the two multipliers are within 2 ulp."""
    folder = made("modelopt", "nvfp4")
    loaded = load_checkpoint(folder)
    t = loaded.tensors["model.layers.0.mlp"]
    qc = loaded.quant_configs["model.layers.0.mlp"]
    from harness.moe.experts import make_experts

    w13, _ = make_experts(qc).dequantize_weights()
    codes = hf.unpack_fp4(t["w13_weight"])
    vals = hf.minifloat.decode(hf.FORMATS["nvfp4"].element, codes)
    s = t["w13_weight_scale"].to(torch.float32)
    ws2 = t["w13_weight_scale_2"][:, 0].reshape(-1, 1, 1)
    m_harness = s / (1.0 / ws2)
    m_modelopt = s * ws2
    E, N, K = vals.shape
    again = (vals.reshape(E, N, K // 16, 16) * m_harness.unsqueeze(-1)).reshape(E, N, K)
    assert torch.equal(again, w13)
    ulp = torch.nextafter(m_modelopt, torch.full_like(m_modelopt, float("inf"))) - m_modelopt
    assert float(((m_harness - m_modelopt).abs() / ulp).max()) <= 2


@pytest.mark.parametrize("producer,scheme", [("llmcompressor", "nvfp4"), ("modelopt", "nvfp4")])
def test_nvfp4_global_scales_are_per_expert_and_encode_side(producer, scheme):
    """Both conventions load to the same encode-side per-expert scales: 2688 / amax of w13."""
    qc = load_checkpoint(made(producer, scheme)).quant_configs["model.layers.0.mlp"]
    from safetensors.torch import load_file

    src = load_file(str(source.model_dir() / "model.safetensors"))
    p = "model.layers.0.mlp.experts"
    for e in range(8):
        amax = torch.cat([src[f"{p}.{e}.gate_proj.weight"], src[f"{p}.{e}.up_proj.weight"]]).abs().amax()
        want = float(hf.nvfp4_global_scale(amax))
        assert float(qc.w13_gscale[e]) == pytest.approx(want, rel=2 ** -22), (producer, e)
