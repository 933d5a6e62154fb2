"""Synthetic checkpoints: the compressed-tensors layout (checked by
compressed-tensors itself when installed), seeded, sharded, and loaded into
moe-emu through harness.moe's loaders with every expert tensor on its layer's device."""

import json

import pytest
import torch

import harness.formats as hf
from harness.checkpoints import synthetic
from harness.emulation import synthetic_loader
from harness.commands.checkpoint_synth import plan
from harness.models.shapes import SHAPES, get_shape
from harness.emulation import parallel
from suites.multigpu.synthetic_files import all_tensors

CASES = [("tiny-qwen3-moe", "nvfp4"), ("tiny-mixtral", "mxfp4")]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    for shape, scheme in CASES:
        d = tmp_path_factory.mktemp(f"{shape}-{scheme}")
        synthetic.write(shape, scheme, d, seed=7, device="cpu", shard_bytes=40_000)
        out[(shape, scheme)] = d
    return out




def test_real_shape_parameter_counts():
    # published sizes: Mixtral-8x7B 46.7B, Qwen3-30B-A3B 30.5B, Mixtral-8x22B 141B, Qwen3-235B-A22B 235B
    assert round(SHAPES["mixtral-8x7b"].params / 1e9, 1) == 46.7
    assert round(SHAPES["qwen3-30b-a3b"].params / 1e9, 1) == 30.5
    assert round(SHAPES["mixtral-8x22b"].params / 1e9) == 141
    assert round(SHAPES["qwen3-235b-a22b"].params / 1e9) == 235
    big = plan("mixtral-8x22b", "nvfp4")
    assert not big["bf16_fits_one_h200"] and not big["emulated_fits_one_h200"]


@pytest.mark.parametrize("shape, scheme", CASES)
def test_layout_sharded_and_sized(written, shape, scheme):
    folder = written[(shape, scheme)]
    idx = json.loads((folder / "model.safetensors.index.json").read_text())
    files = sorted(set(idx["weight_map"].values()))
    assert len(files) > 1 and all(f.endswith(f"-of-{len(files):05d}.safetensors") for f in files)
    t = all_tensors(folder)
    s = get_shape(shape)
    block = synthetic.block_size(scheme)
    assert idx["metadata"]["total_size"] == sum(v.numel() * v.element_size() for v in t.values()) == s.disk_bytes(block)
    gate, up, down = synthetic.expert_projections(s)
    base = f"{synthetic.moe_prefix(s, 1)}.experts.3."
    H, I = s.hidden, s.moe_intermediate
    assert t[base + gate + ".weight_packed"].shape == (I, H // 2) and t[base + gate + ".weight_packed"].dtype == torch.uint8
    assert t[base + down + ".weight_packed"].shape == (H, I // 2)
    scale = t[base + gate + ".weight_scale"]
    assert scale.shape == (I, H // block)
    if scheme == "nvfp4":
        assert scale.dtype == torch.float8_e4m3fn
        for n in (gate, up, down):
            for k in ("weight_global_scale", "input_global_scale"):
                assert t[f"{base}{n}.{k}"].dtype == torch.float32 and t[f"{base}{n}.{k}"].shape == (1,)
        # llm-compressor fuses the gate/up global scale
        assert torch.equal(t[base + gate + ".weight_global_scale"], t[base + up + ".weight_global_scale"])
    else:
        assert scale.dtype == torch.uint8 and not any(k.endswith("global_scale") for k in t)
    assert t["model.embed_tokens.weight"].dtype == torch.bfloat16
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg[synthetic.SYNTH_KEY]["seed"] == 7 and cfg[synthetic.SYNTH_KEY]["rng_device"] == "cpu"
    assert cfg["quantization_config"]["quant_method"] == "compressed-tensors"


@pytest.mark.parametrize("shape, scheme", CASES)
def test_compressed_tensors_reads_it(written, shape, scheme):
    """compressed-tensors parses the config and decompresses an expert to the
    same values harness.formats decodes from it."""
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor

    folder = written[(shape, scheme)]
    cfg = json.loads((folder / "config.json").read_text())["quantization_config"]
    qcfg = ct.QuantizationConfig.model_validate(cfg)
    group = qcfg.config_groups["group_0"]
    s = get_shape(shape)
    t = all_tensors(folder)
    gate, _, _ = synthetic.expert_projections(s)
    base = f"{synthetic.moe_prefix(s, 0)}.experts.1.{gate}."
    sd = {k: t[base + k] for k in ("weight_packed", "weight_scale", "weight_global_scale") if base + k in t}
    comp = BaseCompressor.get_value_from_registry(cfg["format"])
    fmt = synthetic.weight_format(scheme)
    gs = hf.global_scale_from_compressed_tensors(sd["weight_global_scale"]) if scheme == "nvfp4" else None
    q = hf.QuantizedTensor(hf.unpack_fp4(sd["weight_packed"]), sd["weight_scale"], gs, fmt)
    want = hf.dequantize(q, torch.float32)
    got = comp.decompress(sd, group)["weight"]  # compressed-tensors decompresses into bf16
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.to(torch.bfloat16))
    # and in float32, its unpack / scale decode / dequantize agree bit for bit
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    m, n = sd["weight_packed"].shape
    x = unpack_fp4_from_uint8(sd["weight_packed"], m, 2 * n, dtype=torch.float32)
    got32 = dequantize(x_q=x, scale=comp._decompress_scale(sd["weight_scale"], torch.float32), args=group.weights,
                       global_scale=sd.get("weight_global_scale"), dtype=torch.float32)
    assert torch.equal(got32, want)
    # and those bytes are the quantization of the seeded weight
    _, up, _ = synthetic.expert_projections(s)
    w = synthetic.random_normal(base + "weight", (s.moe_intermediate, s.hidden), 7, "cpu")
    if scheme == "nvfp4":
        w_up = synthetic.random_normal(base.replace(gate, up) + "weight", (s.moe_intermediate, s.hidden), 7, "cpu")
        q_seed = hf.quantize(w, "nvfp4", global_scale=hf.nvfp4_global_scale(torch.maximum(w.abs().amax(),
                                                                                         w_up.abs().amax())))
    else:
        q_seed = hf.quantize(w, "mxfp4", scale_mode="even")
    assert torch.equal(got32, hf.dequantize(q_seed, torch.float32))


def test_seeded_and_order_independent(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    synthetic.write("tiny-mixtral", "mxfp4", a, seed=1, device="cpu")
    synthetic.write("tiny-mixtral", "mxfp4", b, seed=1, device="cpu", shard_bytes=30_000)
    synthetic.write("tiny-mixtral", "mxfp4", c, seed=2, device="cpu")
    ta, tb, tc = all_tensors(a), all_tensors(b), all_tensors(c)
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    k = "model.layers.1.block_sparse_moe.experts.2.w2.weight_packed"
    assert not torch.equal(ta[k], tc[k])


def test_refuses_non_empty_out_and_unknown_names(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(ValueError, match="folder is not empty"):
        synthetic.write("tiny-mixtral", "mxfp4", tmp_path, device="cpu")
    with pytest.raises(ValueError, match="unknown shape 'gpt-9'"):
        synthetic.write("gpt-9", "mxfp4", tmp_path / "y", device="cpu")
    with pytest.raises(ValueError, match="unknown scheme 'int4'"):
        synthetic.write("tiny-mixtral", "int4", tmp_path / "y", device="cpu")


@pytest.mark.parametrize("shape, scheme", CASES)
def test_loaded_experts_are_the_written_ones(written, shape, scheme):
    """The loader's emulated experts decode to exactly the checkpoint's values."""
    folder = written[(shape, scheme)]
    r = synthetic_loader.load(folder, devices=["cpu"])
    assert r.scheme == synthetic.SCHEMES[scheme]
    s = get_shape(shape)
    t = all_tensors(folder)
    gate, up, down = synthetic.expert_projections(s)
    qc = r.blocks["model.layers.1.mlp"].emulated.quant_config
    base = f"{synthetic.moe_prefix(s, 1)}.experts.2."
    w13_codes = torch.cat([hf.unpack_fp4(t[base + gate + ".weight_packed"]), hf.unpack_fp4(t[base + up + ".weight_packed"])])
    assert torch.equal(qc.w13_q.codes[2], w13_codes)
    assert torch.equal(qc.w2_q.codes[2], hf.unpack_fp4(t[base + down + ".weight_packed"]))
    want_s = torch.cat([t[base + gate + ".weight_scale"], t[base + up + ".weight_scale"]])
    assert torch.equal(qc.w13_q.scales[2], hf.scale_bytes(want_s, synthetic.weight_format(scheme), "s"))
    if scheme == "nvfp4":
        assert torch.equal(qc.w13_gscale[2].reshape(1), hf.global_scale_from_compressed_tensors(t[base + gate + ".weight_global_scale"]))
        assert qc.a1_gscale is not None and qc.a2_gscale is not None
    router = t[f"{synthetic.moe_prefix(s, 1)}.gate.weight"]
    assert torch.equal(r.blocks["model.layers.1.mlp"].router_weight, router)


def test_loader_places_each_layer_on_its_device(written):
    # mxfp4: the nvfp4 loader checks values (gate/up global scales agree), which meta tensors do not have
    folder = written[("tiny-mixtral", "mxfp4")]
    dm = synthetic_loader.device_map_for(synthetic_loader.read_config(folder), ["cpu", "meta"])
    r = synthetic_loader.load(folder, device_map=dm, dispatch=False)
    seen = {n: {t.device.type for _, t in parallel.iter_tensors(b)} for n, b in r.blocks.items()}
    assert seen == {"model.layers.0.mlp": {"cpu"}, "model.layers.1.mlp": {"meta"}}


def test_loader_reads_a_tied_transformers5_qwen3_moe_folder(written, tmp_path):
    """What the producers write for the tiny model (transformers 5): qwen3_moe
    with num_local_experts, tie_word_embeddings and no lm_head.weight. The
    loader ties lm_head to the embedding instead of asking for lm_head."""
    import shutil

    from safetensors.torch import save_file

    folder = tmp_path / "tied"
    shutil.copytree(written[("tiny-qwen3-moe", "nvfp4")], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["num_local_experts"] = cfg.pop("num_experts")
    cfg["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(cfg))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = folder / index["weight_map"].pop("lm_head.weight")
    tensors = {k: v for k, v in all_tensors(folder).items() if k != "lm_head.weight" and index["weight_map"].get(k) == shard.name}
    save_file(tensors, str(shard))
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    r = synthetic_loader.load(folder, devices=["cpu"])
    assert r.model.lm_head.weight is r.model.model.embed_tokens.weight
    assert torch.equal(r.model.lm_head.weight, all_tensors(folder)["model.embed_tokens.weight"].to(r.model.lm_head.weight.dtype))


def test_balanced_layers():
    assert synthetic_loader.balanced_layers([1] * 6, 2) == [0, 0, 0, 1, 1, 1]
    assert synthetic_loader.balanced_layers([1] * 5, 2) == [0, 0, 1, 1, 1]
    assert synthetic_loader.balanced_layers([1] * 94, 2).count(0) == 47
    assert synthetic_loader.balanced_layers([1] * 3, 1) == [0, 0, 0]


@pytest.mark.slow
@pytest.mark.cpu_only("with a GPU visible, the single-device run picks cuda:0 and the 'cpu' device map means GPU "
                      "execution with offload: two devices, not one; test_two_gpus is the GPU run")
@pytest.mark.parametrize("shape, scheme", CASES)
def test_moe_emu_runs_it_single_and_parallelized_identically(written, shape, scheme):
    from harness.lmeval.adapter import MoEEmuLM

    folder = written[(shape, scheme)]
    want = synthetic.SCHEMES[scheme]
    one = MoEEmuLM(pretrained=str(folder), scheme=want, batch_size=4)
    two = MoEEmuLM(pretrained=str(folder), scheme=want, batch_size=4, parallelize=True,
                   device_map=json.dumps(synthetic_loader.device_map_for(synthetic_loader.read_config(folder),
                                                                        ["cpu", "cpu"])))
    assert parallel.has_hooks(two.model) and two.parallel_info()["mode"] == "model"
    rows = [one.tok_encode(x) for x in ("12+34=46\n", "7+8=", "100+250=350\n3+4=7\n")]
    for a, b in zip(one.logprobs(rows), two.logprobs(rows)):
        assert torch.equal(a, b)
    assert one._greedy(["12+3="], ["\n"], 4) == two._greedy(["12+3="], ["\n"], 4)
    with pytest.raises(ValueError, match=f"quantized as {want}; scheme 'bf16' cannot run"):
        one.set_scheme("bf16")
    one.set_scheme("oracle:" + want)  # the certified oracle accepts the checkpoint's layers
    one.logprobs(rows)
    stats = one.swapper.oracle_stats("oracle:" + want)
    assert stats["elements"] > 0 and stats["outside"] == 0


def test_checkpoint_errors_name_file_and_field(written, tmp_path):
    from harness.checkpoints.errors import CheckpointFormatError

    folder = written[("tiny-qwen3-moe", "nvfp4")]
    cfg = json.loads((folder / "config.json").read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg["quantization_config"]["format"] = "int-quantized"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointFormatError, match="safetensors"):
        synthetic_loader.checkpoint_scheme(bad)
    first = sorted(folder.glob("*.safetensors"))[0]
    (bad / first.name).write_bytes(first.read_bytes())
    with pytest.raises(CheckpointFormatError, match=r"bad/config.json.*quantization_config.format.*int-quantized"):
        synthetic_loader.checkpoint_scheme(bad)


@pytest.mark.parametrize("shape, scheme", CASES)
def test_producer_roundtrip_bit_for_bit(written, shape, scheme):
    """`checkpoint check`'s proof: compressed-tensors' own dequantization of every
    expert tensor equals the harness', bit for bit."""
    pytest.importorskip("compressed_tensors")
    from harness.checkpoints.roundtrip import roundtrip

    rt = roundtrip(written[(shape, scheme)])
    assert rt.ok, rt.summary()


def test_producer_checkpoint_blocks_built_on_their_layer_device(tmp_path):
    """A compressed-tensors checkpoint paired with its float model (`checkpoint=`):
    each block's quant config is built on its layer's device (layer 1 on meta)."""
    from transformers import AutoModelForCausalLM

    from harness.emulation import checkpoint_blocks
    from harness.emulation.moe_swap import Swapper
    from harness.models.tiny_model import bundled_dir

    synthetic.write("tiny-moe", "mxfp4", tmp_path / "c", seed=0, device="cpu")
    model = AutoModelForCausalLM.from_pretrained(bundled_dir(), dtype=torch.float32, local_files_only=True)
    model.model.layers[1].to("meta")
    sw = Swapper.attach(model)
    scheme, mods = checkpoint_blocks.build(sw, str(tmp_path / "c"), "compressed-tensors")
    assert scheme == "w_mxfp4_a_mxfp4"
    parallel.check_placement(model, mods)
    seen = {n: {t.device.type for _, t in parallel.iter_tensors(b)} for n, b in mods.items()}
    assert seen == {"model.layers.0.mlp": {"cpu"}, "model.layers.1.mlp": {"meta"}, "model.layers.2.mlp": {"cpu"}}


@pytest.mark.parametrize("backend, keep_codes", [("fused", False), ("fused", True), ("unfused", True)])
def test_loader_keeps_codes_as_asked(written, backend, keep_codes):
    """The loader builds every block with the keep_codes it is given; a fused
    block without codes decodes nothing more and refuses the oracle."""
    from harness.emulation.moe_swap import OracleMoE
    from harness.moe.config import CodesReleasedError

    folder = written[("tiny-mixtral", "mxfp4")]
    r = synthetic_loader.load(folder, devices=["cpu"], backend=backend, keep_codes=keep_codes, dispatch=False)
    released = {n: b.emulated.quant_config.codes_released for n, b in r.blocks.items()}
    assert released == {n: not keep_codes for n in r.blocks}
    layer = r.blocks["model.layers.0.mlp"].emulated
    if keep_codes:
        OracleMoE(layer)
    else:
        with pytest.raises(CodesReleasedError, match="certified oracle"):
            OracleMoE(layer)
    if backend == "unfused":
        with pytest.raises(ValueError, match="keep_codes=False needs backend='fused'"):
            synthetic_loader.load(folder, devices=["cpu"], backend=backend, keep_codes=False, dispatch=False)


@pytest.mark.cpu_only("the single-device moe-emu picks cuda:0 where a GPU is visible")
@pytest.mark.parametrize("oracle", [False, True])
def test_moe_emu_drops_codes_iff_no_oracle(written, oracle):
    """moe-emu on a fused checkpoint model: oracle=false releases the codes
    (moe_swap.keep_codes_for) and asking for the oracle is then one clear
    error; the default (oracle may be asked) keeps them."""
    from harness.lmeval.adapter import MoEEmuLM
    from harness.moe.config import CodesReleasedError

    folder = written[("tiny-mixtral", "mxfp4")]
    want = synthetic.SCHEMES["mxfp4"]
    lm = MoEEmuLM(pretrained=str(folder), scheme=want, batch_size=4, backend="fused", oracle=str(oracle).lower())
    assert lm.keep_codes is oracle and lm.describe()["keep_codes"] is oracle
    assert {b.emulated.quant_config.codes_released for b in lm.swapper.built[want].values()} == {not oracle}
    if oracle:
        lm.set_scheme("oracle:" + want)
    else:
        with pytest.raises(CodesReleasedError, match=r"certified oracle .*keep_codes=True"):
            lm.set_scheme("oracle:" + want)


@pytest.mark.parametrize("keep_codes", [False, True])
def test_producer_checkpoint_blocks_keep_codes_as_asked(tmp_path, keep_codes):
    """checkpoint_blocks.build passes keep_codes to every block it builds."""
    from transformers import AutoModelForCausalLM

    from harness.emulation import checkpoint_blocks
    from harness.emulation.moe_swap import Swapper
    from harness.models.tiny_model import bundled_dir

    synthetic.write("tiny-moe", "mxfp4", tmp_path / "c", seed=0, device="cpu")
    model = AutoModelForCausalLM.from_pretrained(bundled_dir(), dtype=torch.float32, local_files_only=True)
    sw = Swapper.attach(model)
    _, mods = checkpoint_blocks.build(sw, str(tmp_path / "c"), "compressed-tensors", "fused", keep_codes=keep_codes)
    assert {b.emulated.quant_config.codes_released for b in mods.values()} == {not keep_codes}
