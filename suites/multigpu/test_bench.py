"""`bench multigpu` dry check on CPU (tiny synthetic checkpoint, all three
modes, same code path as on GPUs; no timing asserted) and the memory model."""

import argparse
import statistics

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.checkpoints import synthetic
from harness.emulation import synthetic_loader
from harness.models.shapes import SHAPES, from_hf_config
from harness.commands.bench import multigpu as bench_multigpu
from harness.emulation import memory_model
from harness.schemes import get_scheme
from harness.schemes import EXPERT_BACKENDS


def _args(ckpt, **kw):
    a = dict(checkpoint=str(ckpt), scheme=None, modes="single,model,data", gpus=2, requests=4, ctx_len=12,
             gen_requests=2, gen_tokens=3, batch_size=2, backend="unfused", seed=0, repeats=2, timeout=600, report_root="reports", no_report=True)
    a.update(kw)
    return argparse.Namespace(**a)


@pytest.mark.slow
@pytest.mark.cpu_only("bench multigpu runs its workers on the GPUs when it sees them; test_two_gpus is the GPU run")
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
    for m in out["raw"]:  # every phase timed `repeats` times; the median is the one reported
        for r in m["ranks"]:
            assert len(r["ll_s_runs"]) == len(r["gen_s_runs"]) == 2
            assert r["ll_s"] == statistics.median(r["ll_s_runs"]) and r["gen_s"] == statistics.median(r["gen_s_runs"])


def test_unknown_mode_refused(tmp_path):
    with pytest.raises(ValueError, match="--modes: unknown mode 'pipeline'"):
        bench_multigpu.run(_args(tmp_path, modes="single,pipeline", scheme="nvfp4"))


def test_zero_repeats_refused(tmp_path):
    with pytest.raises(ValueError, match="--repeats: at least one timed run per phase, got 0"):
        bench_multigpu.run(_args(tmp_path, repeats=0))


def test_requests_are_seeded():
    assert bench_multigpu.make_requests(3, 8, 1) == bench_multigpu.make_requests(3, 8, 1)
    assert bench_multigpu.make_requests(3, 8, 1) != bench_multigpu.make_requests(3, 8, 2)


@pytest.mark.parametrize("name", ["mixtral-8x22b", "qwen3-235b-a22b", "qwen3-30b-a3b", "deepseek-v3-5layers",
                                  "llama-4-scout", "gpt-oss-120b"])
@pytest.mark.parametrize("scheme", ["nvfp4", "w_mxfp4_a_mxfp4"])
@pytest.mark.parametrize("backend", EXPERT_BACKENDS)
def test_paper_weights_add_up_over_devices(name, scheme, backend):
    s = SHAPES[name]
    spec = get_scheme(scheme).weight_spec
    block = spec.block_size
    # on a CUDA device MX e2m1 words take the "mma" order, stored past a ragged long K (gpt-oss: read_k)
    mma = memory_model.mma_words(spec.name)
    fused = dict(fused=backend == "fused", mma=mma)
    dm = synthetic_loader.device_map_for(s.hf_config(), ["cuda:0", "cuda:1"])
    two = memory_model.per_device(s, scheme, dm, batch=4, seq=512, backend=backend)
    one = memory_model.per_device(s, scheme, synthetic_loader.device_map_for(s.hf_config(), ["cuda:0"]), 4, 512,
                                  backend=backend)
    assert sum(d["weights"] for d in two.values()) == one["cuda:0"]["weights"] == s.emulated_bytes(block, **fused)
    # bf16 logits made on the last GPU, moved to the first one
    assert two["cuda:0"]["logits"] == two["cuda:1"]["logits"] == one["cuda:0"]["logits"] == 4 * 512 * s.vocab * 2
    assert abs(two["cuda:0"]["weights"] - two["cuda:1"]["weights"]) <= (s.emulated_layer_bytes(block, **fused)
                                                                        + 4 * s.vocab * s.hidden)


def test_fused_weights_on_paper_are_what_the_layer_holds():
    """The fused backend's bytes on paper equal the bytes of every tensor a
    built fused layer holds (codes, scales, global scales, packed codes),
    counted once per storage, for a two-level and an MX scheme, in both
    precisions of the two-level one."""
    import torch

    import harness.moe as hm
    from harness.emulation.parallel import iter_tensors

    s = SHAPES["tiny-qwen3-moe"]
    g = torch.Generator().manual_seed(0)
    w13 = torch.randn(s.experts, 2 * s.moe_intermediate, s.hidden, generator=g)
    w2 = torch.randn(s.experts, s.hidden, s.moe_intermediate, generator=g)
    for scheme, precision in (("nvfp4", "ieee"), ("nvfp4", "bf16"), ("w_mxfp4_a_mxfp4", "ieee")):
        moe = hm.build_emulated_moe(scheme, w13, w2, top_k=s.top_k, backend="fused", fused_precision=precision,
                                    a1_gscale=torch.tensor(1.0), a2_gscale=torch.tensor(1.0))
        ex = moe.experts
        held = {}
        for obj in (moe.quant_config.w13_q, moe.quant_config.w2_q, moe.quant_config.w13_gscale,
                    moe.quant_config.w2_gscale, *ex._kernel_weights):
            for _, t in iter_tensors(obj):
                held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        spec = get_scheme(scheme).weight_spec
        want = (s.emulated_expert_bytes_per_layer(spec.block_size)
                + s.kernel_expert_bytes_per_layer(spec.block_size))
        assert sum(held.values()) == want, (scheme, precision)


def test_shape_from_config_round_trips():
    for s in SHAPES.values():
        back = from_hf_config(s.hf_config(), s.name)
        assert back.params == s.params and back.emulated_bytes(16) == s.emulated_bytes(16)
