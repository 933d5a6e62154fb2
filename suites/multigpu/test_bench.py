"""`bench multigpu` dry check on CPU (tiny synthetic checkpoint, all three
modes, same code path as on GPUs; no timing asserted) and the memory model."""

import argparse

import pytest

from harness.checkpoints import synthetic, synthetic_loader
from harness.checkpoints.shapes import SHAPES, from_hf_config
from harness.lmeval import bench_multigpu, memory_model


def _args(ckpt, **kw):
    a = dict(checkpoint=str(ckpt), scheme=None, modes="single,model,data", gpus=2, requests=4, ctx_len=12,
             gen_requests=2, gen_tokens=3, batch_size=2, backend="unfused", seed=0, timeout=600, report_root="reports", no_report=True)
    a.update(kw)
    return argparse.Namespace(**a)


def test_dry_run_all_modes_on_cpu(tmp_path):
    ckpt = tmp_path / "ckpt"
    synthetic.write("tiny-qwen3-moe", "nvfp4", ckpt, seed=0, device="cpu")
    out = bench_multigpu.run(_args(ckpt))
    assert out["scheme"] == "nvfp4"
    by = {m["mode"]: m for m in out["modes"]}
    assert list(by) == ["single", "model", "data"]
    assert [by[m]["processes"] for m in by] == [1, 1, 2]
    assert by["model"]["parallel"]["mode"] == "model" and by["data"]["parallel"]["mode"] == "data"
    for m in by.values():
        assert m["loglikelihood_tokens"] == 4 * (12 + bench_multigpu.CONT_TOKENS)  # one token per character
        assert 0 < m["generation_tokens"] <= 2 * 3
        assert set(m["paper_gib"]) == {"cpu"}
    ranks = out["raw"][2]["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1] and sum(r["ll_tokens"] for r in ranks) == 4 * 16
    assert set(out["speedup"]) == {"data_loglikelihood_tok_s_x", "data_generation_tok_s_x"}


def test_unknown_mode_refused(tmp_path):
    with pytest.raises(ValueError, match="--modes: unknown mode 'pipeline'"):
        bench_multigpu.run(_args(tmp_path, modes="single,pipeline", scheme="nvfp4"))


def test_requests_are_seeded():
    assert bench_multigpu.make_requests(3, 8, 1) == bench_multigpu.make_requests(3, 8, 1)
    assert bench_multigpu.make_requests(3, 8, 1) != bench_multigpu.make_requests(3, 8, 2)


@pytest.mark.parametrize("name", ["mixtral-8x22b", "qwen3-235b-a22b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("block", [16, 32])
def test_paper_weights_add_up_over_devices(name, block):
    s = SHAPES[name]
    dm = synthetic_loader.device_map_for(s.hf_config(), ["cuda:0", "cuda:1"])
    two = memory_model.per_device(s, block, dm, batch=4, seq=512)
    one = memory_model.per_device(s, block, synthetic_loader.device_map_for(s.hf_config(), ["cuda:0"]), 4, 512)
    assert sum(d["weights"] for d in two.values()) == one["cuda:0"]["weights"] == s.emulated_bytes(block)
    assert two["cuda:0"]["logits"] == 0 and two["cuda:1"]["logits"] == 4 * 512 * s.vocab * 10
    assert abs(two["cuda:0"]["weights"] - two["cuda:1"]["weights"]) <= s.emulated_layer_bytes(block) + 4 * s.vocab * s.hidden


def test_shape_from_config_round_trips():
    for s in SHAPES.values():
        back = from_hf_config(s.hf_config(), s.name)
        assert back.params == s.params and back.emulated_bytes(16) == s.emulated_bytes(16)
