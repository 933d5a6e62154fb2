"""On a host with two GPUs: moe-emu split over cuda:0 and cuda:1 by an
accelerate device_map scores exactly like one GPU, and every expert tensor
sits on its layer's GPU. Skipped with fewer than two GPUs (the CPU suites
check the same code paths with CPU and meta devices)."""

import json

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.checkpoints import synthetic
from harness.emulation import synthetic_loader
from harness.emulation import parallel
from harness.lmeval.adapter import MoEEmuLM

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs of one host")]

ROWS = ["12+34=46\n", "999+1=1000\n7+8=15\n", "5+5=", "100+250=350\n3+4=7\n"]
# tied embeddings: lm_head stays with embed_tokens
SPLIT = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.layers.0": 0, "model.layers.1": 1,
         "model.layers.2": 1, "model.norm": 1, "lm_head": 0}


@pytest.fixture(scope="module")
def one_gpu():
    return MoEEmuLM(pretrained="tiny-moe", scheme="bf16", dtype="float32", batch_size=64, device="cuda:0")


@pytest.fixture(scope="module")
def two_gpus():
    return MoEEmuLM(pretrained="tiny-moe", scheme="bf16", dtype="float32", batch_size=64, parallelize=True,
                    device_map=json.dumps(SPLIT))


@pytest.mark.parametrize("scheme", ["bf16", "nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8"])
def test_split_over_two_gpus_identical_to_one(one_gpu, two_gpus, scheme):
    rows = [one_gpu.tok_encode(t) for t in ROWS]
    one_gpu.set_scheme(scheme)
    two_gpus.set_scheme(scheme)
    assert two_gpus.parallel_info()["block_devices"] == {
        "model.layers.0.mlp": "cuda:0", "model.layers.1.mlp": "cuda:1", "model.layers.2.mlp": "cuda:1"}
    for w, g in zip(one_gpu.logprobs(rows), two_gpus.logprobs(rows)):
        assert torch.equal(w, g)
    devs = {n: {str(t.device) for _, t in parallel.iter_tensors(b)} for n, b in two_gpus.swapper.built[scheme].items()}
    assert devs == {"model.layers.0.mlp": {"cuda:0"}, "model.layers.1.mlp": {"cuda:1"}, "model.layers.2.mlp": {"cuda:1"}}


def test_synthetic_checkpoint_over_two_gpus(tmp_path):
    synthetic.write("tiny-qwen3-moe", "nvfp4", tmp_path / "c", seed=0)
    one = MoEEmuLM(pretrained=str(tmp_path / "c"), scheme="nvfp4", batch_size=4, device="cuda:0")
    two = MoEEmuLM(pretrained=str(tmp_path / "c"), scheme="nvfp4", batch_size=4, parallelize=True)
    dm = synthetic_loader.device_map_for(synthetic_loader.read_config(tmp_path / "c"), ["cuda:0", "cuda:1"])
    assert two.model.hf_device_map == dm
    rows = [one.tok_encode(t) for t in ROWS]
    for w, g in zip(one.logprobs(rows), two.logprobs(rows)):
        assert torch.equal(w, g)


def test_fused_backend_split_identical_to_one_gpu():
    """The Triton fused GEMMs of layers on cuda:1 run on cuda:1 (Triton launches
    on the current device; EmulatedSparseMoeBlock sets it from its input)."""
    kw = dict(pretrained="tiny-moe", scheme="w_mxfp4_a_mxfp4", dtype="float32", batch_size=64, backend="fused")
    one = MoEEmuLM(device="cuda:0", **kw)
    two = MoEEmuLM(parallelize=True, device_map=json.dumps(SPLIT), **kw)
    rows = [one.tok_encode(t) for t in ROWS]
    for w, g in zip(one.logprobs(rows), two.logprobs(rows)):
        assert torch.equal(w, g)
