"""Emulated experts live on their layer's device; the model-parallel path
(accelerate hooks moving activations) scores exactly like one device."""

import json

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.emulation import parallel
from harness.lmeval.adapter import MoEEmuLM
from harness.emulation.builder import emulation_builder
from harness.emulation.moe_swap import Swapper
from harness.models.tiny_model import bundled_dir

ROWS = ["12+34=46\n", "999+1=1000\n7+8=15\n", "5+5=", "100+250=350\n3+4=7\n"]
SCALES = {f"model.layers.{i}.mlp": {"a1_gscale": 300.0, "a2_gscale": 900.0} for i in range(3)}


def _tiny_split_over_cpu_and_meta():
    """The tiny model with layer 1 on the meta device: a second device CPU CI has."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(bundled_dir(), dtype=torch.float32, local_files_only=True)
    model.model.layers[1].to("meta")
    return model


@pytest.mark.parametrize("scheme", ["bf16", "nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8"])
def test_every_expert_tensor_on_its_layer_device(scheme):
    model = _tiny_split_over_cpu_and_meta()
    sw = Swapper.attach(model)
    sw.build(scheme, emulation_builder(), scales=SCALES if scheme == "nvfp4" else None)
    blocks = sw.built[scheme]
    parallel.check_placement(model, blocks)
    seen = {name: {t.device.type for _, t in parallel.iter_tensors(b)} for name, b in blocks.items()}
    assert seen == {"model.layers.0.mlp": {"cpu"}, "model.layers.1.mlp": {"meta"}, "model.layers.2.mlp": {"cpu"}}
    if scheme != "bf16":  # the walk reaches the quant config, which nn.Module.to() never moves
        paths = {p for p, _ in parallel.iter_tensors(blocks["model.layers.1.mlp"])}
        assert {"emulated.experts.quant_config.w13_q.codes", "emulated.experts.quant_config.w13_q.scales",
                "emulated.experts.quant_config.w2_q.scales"} <= paths
    if scheme == "nvfp4":
        assert {"emulated.experts.quant_config.w13_gscale", "emulated.experts.quant_config.a1_gscale",
                "emulated.experts.quant_config.a2_gscale"} <= paths


def test_oracle_blocks_on_their_layer_device():
    model = _tiny_split_over_cpu_and_meta()
    sw = Swapper.attach(model)
    sw.build("w_mxfp4_a_mxfp4", emulation_builder())
    name = sw.build_oracle("w_mxfp4_a_mxfp4")
    parallel.check_placement(model, sw.built[name])


@pytest.mark.parametrize("where", ["emulated.experts.quant_config.w2_q.scales", "emulated.experts.quant_config.a1_gscale",
                                   "router_weight"])
def test_a_cross_device_tensor_is_named(where):
    model = _tiny_split_over_cpu_and_meta()
    sw = Swapper.attach(model)
    sw.build("nvfp4", emulation_builder(), scales=SCALES)
    block = sw.built["nvfp4"]["model.layers.2.mlp"]
    *path, leaf = where.split(".")
    obj = block
    for p in path:
        obj = getattr(obj, p)
    moved = getattr(obj, leaf).to("meta")
    if leaf == "router_weight":
        moved = torch.nn.Parameter(moved, requires_grad=False)
    setattr(obj, leaf, moved)
    with pytest.raises(parallel.PlacementError, match=rf"model\.layers\.2\.mlp\.{where} is on meta, its layer on cpu"):
        parallel.check_placement(model, sw.built["nvfp4"])


def _per_layer_cpu_map():
    return {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
            "model.layers.1": "cpu", "model.layers.2": "cpu", "model.norm": "cpu", "lm_head": "cpu"}


@pytest.fixture(scope="module")
def hooked_lm():
    return MoEEmuLM(pretrained="tiny-moe", scheme="bf16", dtype="float32", batch_size=64, parallelize="True",
                    device_map=json.dumps(_per_layer_cpu_map()))


@pytest.mark.cpu_only("with a GPU visible, accelerate treats a 'cpu' entry as offload and executes on the GPU")
def test_parallelize_attaches_accelerate_hooks(hooked_lm):
    assert hooked_lm.parallel_info()["mode"] == "model"
    for i in range(3):
        assert hasattr(hooked_lm.model.get_submodule(f"model.layers.{i}"), "_hf_hook")
    assert parallel.layer_device(hooked_lm.model, "model.layers.1.mlp") == torch.device("cpu")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["bf16", "nvfp4", "w_mxfp4_a_mxfp4", "oracle:w_mxfp4_a_mxfp4"])
def test_parallelized_logits_identical_to_one_device(plain_lm, hooked_lm, scheme):
    rows = [plain_lm.tok_encode(t) for t in ROWS]
    plain_lm.set_scheme(scheme)
    hooked_lm.set_scheme(scheme)
    want, got = plain_lm.logprobs(rows), hooked_lm.logprobs(rows)
    for w, g in zip(want, got):
        assert torch.equal(w, g)
    if scheme == "nvfp4":  # calibration ran through the hooks too
        assert hooked_lm.calibration_info["amax"] == plain_lm.calibration_info["amax"]


@pytest.mark.slow
def test_parallelized_generation_identical(plain_lm, hooked_lm):
    plain_lm.set_scheme("nvfp4")
    hooked_lm.set_scheme("nvfp4")
    ctx = ["12+34=", "999+1=", "7+8="]
    assert plain_lm._greedy(ctx, ["\n"], 6) == hooked_lm._greedy(ctx, ["\n"], 6)


def test_offload_refused():
    with pytest.raises(ValueError, match="offloads 1 module.*disk.*model.layers.2"):
        parallel.check_device_map({"model.layers.1": 0, "model.layers.2": "disk"}, on_gpus=True)
    with pytest.raises(ValueError, match="offloads 1 module.*cpu.*does not fit"):
        parallel.check_device_map({"model.layers.1": 0, "model.layers.2": "cpu"}, on_gpus=True)
    parallel.check_device_map({"model.layers.1": "cpu"}, on_gpus=False)


@pytest.mark.parametrize("bad, msg", [("everywhere", "device_map must be one of"), ("{oops", "not a JSON object"),
                                      ("[1]", "device_map must be one of")])
def test_bad_device_map_one_line(bad, msg):
    with pytest.raises(ValueError, match=msg):
        parallel.parse_device_map(bad)


def test_bad_parallelize_flag():
    with pytest.raises(ValueError, match="parallelize must be true or false"):
        MoEEmuLM(pretrained="tiny-moe", parallelize="maybe")


def test_a_bare_cuda_device_means_the_current_one(monkeypatch):
    # moe-emu's single-GPU device string is "cuda"; tensors report "cuda:0".
    # Compared as strings, every expert tensor on a GPU would be reported cross-device.
    import torch

    from harness.emulation.parallel import canonical_device

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert canonical_device("cuda") == torch.device("cuda", 1)
    assert canonical_device("cuda:0") == torch.device("cuda", 0)
    assert canonical_device("cpu") == torch.device("cpu")
