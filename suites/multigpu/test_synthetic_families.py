"""Synthetic checkpoints of DeepSeek-V3 (ModelOpt NVFP4), Llama-4 text
(compressed-tensors as llm-compressor writes it) and gpt-oss (its MXFP4
layout): paper sizes equal transformers' own parameter counts, the tiny
twins are written in their producer's names, read back by the readers,
loaded without a float model into layers equal to the checkpoint-blocks
build beside a float model, and refusals name the file and tensor."""

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

import harness.formats as hf
from harness.checkpoints import synthetic
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.load import identify
from harness.emulation import checkpoint_blocks, parallel, synthetic_loader
from harness.emulation.moe_swap import Swapper
from harness.kernels.fused_weights import FusedWeights
from harness.models.shapes import SHAPES, from_hf_config, get_shape
from suites.multigpu.synthetic_files import all_tensors

CASES = [("tiny-deepseek-v3", "nvfp4", "modelopt", "nvfp4"),
         ("tiny-llama4", "nvfp4", "compressed-tensors", "nvfp4"),
         ("tiny-llama4", "mxfp4", "compressed-tensors", "w_mxfp4_a_mxfp4"),
         ("tiny-gpt-oss", "mxfp4", "gpt-oss", "w_mxfp4")]
IDS = [f"{c[0]}-{c[1]}" for c in CASES]
SEED = 5


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    for shape, scheme, _, _ in CASES:
        d = tmp_path_factory.mktemp(f"{shape}-{scheme}") / "ckpt"
        synthetic.write(shape, scheme, d, seed=SEED, device="cpu", shard_bytes=40_000)
        out[(shape, scheme)] = d
    return out




def _meta_params(cfg: dict) -> dict:
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    return {k: tuple(v.shape) for k, v in m.state_dict().items()}


@pytest.mark.parametrize("name", ["deepseek-v3-5layers", "llama-4-scout", "gpt-oss-120b", "tiny-deepseek-v3",
                                  "tiny-llama4", "tiny-gpt-oss"])
def test_paper_params_are_transformers_own_count(name):
    s = get_shape(name)
    assert s.params == sum(torch.Size(v).numel() for v in _meta_params(s.hf_config()).values())
    back = from_hf_config(s.hf_config(), s.name)
    assert back.params == s.params and back.disk_bytes(16) == s.disk_bytes(16)


def test_real_shapes_against_published_totals():
    # gpt-oss-120b 116.83B (OpenAI's model card); Llama-4-Scout 109B total with the vision tower,
    # the text model 107.77B; DeepSeek-V3 671B without its MTP module, at all 61 layers
    assert round(SHAPES["gpt-oss-120b"].params / 1e9, 2) == 116.83
    assert round(SHAPES["llama-4-scout"].params / 1e9, 2) == 107.77
    ds = SHAPES["deepseek-v3-5layers"]
    assert ds.layers == 5 and ds.dense_layers == 3 and "5 of DeepSeek-V3's 61 layers" in ds.note
    assert round(dataclasses.replace(ds, layers=61).params / 1e9) == 671


@pytest.mark.parametrize("shape, scheme, fmt, hscheme", CASES, ids=IDS)
def test_written_in_the_producer_layout_and_read_back(written, shape, scheme, fmt, hscheme):
    folder = written[(shape, scheme)]
    s = get_shape(shape)
    files, got_fmt, got_scheme = identify(folder)
    assert (got_fmt, got_scheme) == (fmt, hscheme)
    t = all_tensors(folder)
    idx = json.loads((folder / "model.safetensors.index.json").read_text())
    assert idx["metadata"]["total_size"] == sum(v.numel() * v.element_size() for v in t.values())
    assert idx["metadata"]["total_size"] == s.disk_bytes(synthetic.block_size(scheme))
    H, I, E = s.hidden, s.moe_intermediate, s.experts
    layout = synthetic.LAYOUTS[s.family]
    blocks = synthetic.moe_blocks(s)
    b = blocks[-1]
    # every non-expert tensor is transformers' own, name and shape
    meta = _meta_params(s.hf_config())
    dense = {k: v for k, v in meta.items() if not any(k.startswith(f"{x}.experts.") for x in blocks)
             and not (layout.shared and any(k.startswith(f"{x}.{layout.shared}.") for x in blocks))}
    assert {k: tuple(t[k].shape) for k in dense} == dense
    if fmt == "modelopt":
        p = f"{b}.experts.{E - 1}.down_proj."
        assert t[p + "weight"].dtype == torch.uint8 and t[p + "weight"].shape == (H, I // 2)
        assert t[p + "weight_scale"].dtype == torch.float8_e4m3fn and t[p + "weight_scale"].shape == (H, I // 16)
        assert t[p + "weight_scale_2"].shape == () and t[p + "input_scale"].shape == ()
        g, u = (t[f"{b}.experts.0.{n}.weight_scale_2"] for n in ("gate_proj", "up_proj"))
        assert torch.equal(g, u)
        assert t[f"{b}.shared_experts.gate_proj.weight"].shape == (s.shared_intermediate, H // 2)
        assert t[f"{b}.gate.e_score_correction_bias"].dtype == torch.float32
        assert "model.layers.0.mlp.gate_proj.weight" in t  # the dense first layer, bf16
        assert json.loads((folder / "hf_quant_config.json").read_text())["quantization"]["quant_algo"] == "NVFP4"
    elif fmt == "compressed-tensors":
        p = f"{b}.experts.{E - 1}.up_proj."
        assert t[p + "weight_packed"].shape == (I, H // 2)
        assert f"{b}.shared_expert.down_proj.weight_packed" in t and t[f"{b}.router.weight"].dtype == torch.bfloat16
    else:
        assert t[f"{b}.experts.gate_up_proj_blocks"].shape == (E, 2 * I, H // 32, 16)
        assert t[f"{b}.experts.down_proj_scales"].shape == (E, H, I // 32)
        assert t[f"{b}.experts.gate_up_proj_bias"].dtype == torch.bfloat16
        assert f"{b}.router.bias" in t and f"{blocks[0]}.experts.down_proj_bias" in t


def _seeded_codes(s, scheme, block, e, proj, seed=SEED):
    """The codes of the seeded weight of one expert projection, quantized as the layout does."""
    size = (s.hidden, s.moe_intermediate) if proj == "down_proj" else (s.moe_intermediate, s.hidden)
    w = synthetic.random_normal(f"{block}.experts.{e}.{proj}.weight", size, seed, "cpu")
    if scheme == "mxfp4":
        return hf.quantize(w, "mxfp4", scale_mode="even").codes, None
    return None, w


@pytest.mark.parametrize("shape, scheme, fmt, hscheme", CASES, ids=IDS)
def test_loaded_experts_are_the_seeded_weights(written, shape, scheme, fmt, hscheme):
    """The loaded layer's expert codes are the quantization of the weights drawn from
    (seed, the expert projection's name), gate rows then up rows (gpt-oss de-interleaved);
    NVFP4: its decoded weights are the seeded weights' NVFP4 QDQ at the file's global scale."""
    folder = written[(shape, scheme)]
    s = get_shape(shape)
    r = synthetic_loader.load(folder, devices=["cpu"])
    b = synthetic.moe_blocks(s)[-1]
    qc = r.blocks[b].emulated.quant_config
    e = s.experts - 1
    if scheme == "mxfp4":
        gate, up, down = (_seeded_codes(s, scheme, b, e, p)[0] for p in synthetic.PROJ_NAMES)
        assert torch.equal(qc.w13_q.codes[e], torch.cat([gate, up]))
        assert torch.equal(qc.w2_q.codes[e], down)
        return
    w = {p: _seeded_codes(s, scheme, b, e, p)[1] for p in synthetic.PROJ_NAMES}
    for key, ws in (("w13", (w["gate_proj"], w["up_proj"])), ("w2", (w["down_proj"],))):
        q = getattr(qc, f"{key}_q")
        gs = getattr(qc, f"{key}_gscale")[e].reshape(())
        want = torch.cat([hf.qdq(x, "nvfp4", global_scale=gs) for x in ws])
        got = hf.dequantize(hf.QuantizedTensor(q.codes[e], q.scales[e], gs, "nvfp4"), torch.float32)
        assert torch.equal(got, want), key
        # the global scale is the one of the layout: amax / 2688 decode side (ModelOpt), 2688 / amax encode side
        amax = torch.maximum(*(x.abs().amax() for x in ws)) if len(ws) == 2 else ws[0].abs().amax()
        assert torch.equal(gs, hf.nvfp4_global_scale(amax)) or torch.equal(
            gs, hf.global_scale_from_modelopt(amax / hf.NVFP4_GS_NUMERATOR))


def _float_model_from(folder):
    """transformers' model of the folder's config with every non-expert tensor the checkpoint's."""
    cfg = {k: v for k, v in json.loads((folder / "config.json").read_text()).items()
           if k not in ("quantization_config", synthetic.SYNTH_KEY)}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=torch.bfloat16)
    sd = model.state_dict()
    # (ModelOpt's packed expert `weight` is uint8 under a float model's name: not a float tensor)
    model.load_state_dict({k: v for k, v in all_tensors(folder).items() if k in sd and v.dtype.is_floating_point},
                          strict=False)
    return model.eval()


@pytest.mark.parametrize("shape, scheme, fmt, hscheme", CASES, ids=IDS)
def test_loaded_layer_equals_the_checkpoint_blocks_build(written, shape, scheme, fmt, hscheme):
    """Loaded without a float model, each block holds the tensors (routed and shared codes,
    scale bytes, global scales, expert biases, router, correction bias) that the
    checkpoint-blocks path builds beside a float model, and gives the same output bit for bit."""
    folder = written[(shape, scheme)]
    r = synthetic_loader.load(folder, devices=["cpu"])
    sw = Swapper.attach(_float_model_from(folder))
    got_scheme, mods = checkpoint_blocks.build(sw, str(folder), fmt)
    assert got_scheme == r.scheme == hscheme and set(mods) == set(r.blocks)
    g = torch.Generator().manual_seed(1)
    for name, ref in mods.items():
        blk = r.blocks[name]
        a = dict(parallel.iter_tensors(blk))
        b = dict(parallel.iter_tensors(ref))
        assert a.keys() == b.keys(), name
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), (name, k)
        assert torch.equal(blk.router_weight, ref.router_weight)
        h = (torch.randn(7, blk.router_weight.shape[1], generator=g) * 4).to(torch.bfloat16)
        oa, ob = blk(h), ref(h)
        oa, ob = (oa[0], ob[0]) if isinstance(oa, tuple) else (oa, ob)
        assert torch.equal(oa, ob), name


def _drop(folder, name):
    """The folder without tensor `name` (its shard rewritten, the index updated)."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = index["weight_map"].pop(name)
    with safe_open(str(folder / shard), framework="pt") as fh:
        keep = {k: fh.get_tensor(k) for k in fh.keys() if k != name}
    save_file(keep, str(folder / shard), metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("shape, scheme, tensor", [
    ("tiny-deepseek-v3", "nvfp4", "model.layers.2.mlp.shared_experts.up_proj.weight_scale_2"),
    ("tiny-deepseek-v3", "nvfp4", "model.layers.1.mlp.gate.e_score_correction_bias"),
    ("tiny-deepseek-v3", "nvfp4", "model.layers.1.mlp.experts.7.down_proj.input_scale"),
    ("tiny-llama4", "nvfp4", "model.layers.0.feed_forward.router.weight"),
    ("tiny-llama4", "nvfp4", "model.layers.1.feed_forward.shared_expert.gate_proj.weight_packed"),
    ("tiny-gpt-oss", "mxfp4", "model.layers.1.mlp.router.bias"),
    ("tiny-gpt-oss", "mxfp4", "model.layers.0.mlp.experts.down_proj_bias"),
])
def test_a_missing_tensor_is_refused_naming_it(written, tmp_path, shape, scheme, tensor):
    folder = tmp_path / "c"
    shutil.copytree(written[(shape, scheme)], folder)
    _drop(folder, tensor)
    with pytest.raises(CheckpointFormatError) as e:
        synthetic_loader.load(folder, devices=["cpu"])
    msg = str(e.value)
    assert str(folder) in msg and (tensor in msg or tensor.replace("down_proj_bias", "gate_up_proj_bias") in msg), msg


def test_llama4_moe_layers_are_read(written, tmp_path):
    """Experts in a layer config.json's moe_layers leaves dense are refused, naming the block."""
    folder = tmp_path / "c"
    shutil.copytree(written[("tiny-llama4", "nvfp4")], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["moe_layers"] = [1]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointFormatError, match=r"model.layers.0.feed_forward.experts.*moe_layers \[1\]"):
        identify(folder)


def test_a_scheme_the_layout_does_not_write_is_refused(tmp_path):
    with pytest.raises(ValueError, match="ModelOpt layout of deepseek_v3 .modelopt. is written as nvfp4"):
        synthetic.write("tiny-deepseek-v3", "mxfp4", tmp_path / "x", device="cpu")
    with pytest.raises(ValueError, match="OpenAI layout of gpt_oss .gpt-oss. is written as mxfp4"):
        synthetic.write("tiny-gpt-oss", "nvfp4", tmp_path / "y", device="cpu")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@pytest.mark.slow
@pytest.mark.cpu_only("with a GPU visible the run picks cuda:0; the two-GPU suite runs the GPU case")
@pytest.mark.parametrize("shape, scheme, fmt, hscheme", CASES, ids=IDS)
def test_moe_emu_runs_it_and_its_oracle_certifies(written, shape, scheme, fmt, hscheme):
    from harness.lmeval.adapter import MoEEmuLM

    lm = MoEEmuLM(pretrained=str(written[(shape, scheme)]), scheme=hscheme, batch_size=4)
    rows = [lm.tok_encode(x) for x in ("12+34=46\n", "7+8=", "100+250=350\n3+4=7\n")]
    base = lm.logprobs(rows)
    lm.set_scheme("oracle:" + hscheme)
    lm.logprobs(rows)
    stats = lm.swapper.oracle_stats("oracle:" + hscheme)
    assert stats["elements"] > 0 and stats["outside"] == 0
    assert all(torch.isfinite(x).all() for x in base)


@pytest.mark.parametrize("shape, scheme", [("tiny-deepseek-v3", "nvfp4"), ("tiny-gpt-oss", "mxfp4")])
def test_a_load_without_codes_builds_kernel_weights_from_host_codes(written, monkeypatch, shape, scheme):
    """keep_codes=False (fused): every block's experts and shared expert get their
    kernel weights from codes unpacked on the host, built onto the block's own
    device (one block placed on meta here, so a copy of the codes there would
    show); the codes are not kept."""
    from harness.kernels.fused_weights import FusedWeights

    calls = []
    real = FusedWeights.from_quantized_by_experts.__func__

    def spy(cls, q, gscale, device, *a, **kw):
        calls.append((q.codes.device.type, torch.device(device).type))
        return real(cls, q, gscale, device, *a, **kw)

    monkeypatch.setattr(FusedWeights, "from_quantized_by_experts", classmethod(spy))
    folder = written[(shape, scheme)]
    cfg = synthetic_loader.read_config(folder)
    dm = synthetic_loader.device_map_for(cfg, ["cpu"])
    last = f"model.layers.{cfg['num_hidden_layers'] - 1}"
    dm[last] = "meta"
    r = synthetic_loader.load(folder, device_map=dm, backend="fused", keep_codes=False, dispatch=False)
    shared = sum(1 for b in r.blocks.values() if b.emulated.shared_experts is not None)
    assert len(calls) == 2 * (len(r.blocks) + shared)
    assert {c[0] for c in calls} == {"cpu"}  # the codes stayed on the host
    assert sorted({c[1] for c in calls}) == ["cpu", "meta"]
    for name, block in r.blocks.items():
        assert block.emulated.quant_config.codes_released, name
        want = "meta" if name.startswith(last + ".") else "cpu"
        assert {t.device.type for _, t in parallel.iter_tensors(block)} == {want}, name


@pytest.mark.parametrize("shape, scheme, fmt, hscheme", CASES, ids=IDS)
def test_a_load_without_codes_computes_what_a_load_with_them_does(written, shape, scheme, fmt, hscheme):
    """The lean load (codes unpacked on the host, kernel weights built a few
    experts at a time) holds the same kernel weights, routed and shared, and
    gives the same output bit for bit as the fused load that keeps its codes."""
    folder = written[(shape, scheme)]
    lean = synthetic_loader.load(folder, devices=["cpu"], backend="fused", keep_codes=False, dispatch=False)
    kept = synthetic_loader.load(folder, devices=["cpu"], backend="fused", keep_codes=True, dispatch=False)
    g = torch.Generator().manual_seed(2)
    for name, blk in lean.blocks.items():
        ref = kept.blocks[name]
        pairs = [(blk.emulated.experts, ref.emulated.experts)]
        if ref.emulated.shared_experts is not None:
            pairs.append((blk.emulated.shared_experts, ref.emulated.shared_experts))
        for a, b in pairs:
            for fa, fb in zip(a._kernel_weights, b._kernel_weights):
                for field in FusedWeights.TENSORS:
                    ta, tb = getattr(fa, field), getattr(fb, field)
                    assert (ta is None) == (tb is None), (name, field)
                    assert ta is None or (ta.dtype == tb.dtype and torch.equal(ta, tb)), (name, field)
        h = (torch.randn(5, blk.router_weight.shape[1], generator=g) * 4).to(torch.bfloat16)
        oa, ob = blk(h), ref(h)
        oa, ob = (oa[0], ob[0]) if isinstance(oa, tuple) else (oa, ob)
        assert torch.equal(oa, ob), name
