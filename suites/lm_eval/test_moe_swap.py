"""The block swap reads each transformers family's expert layout correctly:
with the unquantized scheme the swapped model's logits equal the original's,
for tiny random Mixtral, Qwen2-MoE and Qwen3-MoE models (the layouts of the
installed transformers)."""

import torch

from harness.moe import build_emulated_moe
from harness.emulation.moe_swap import Swapper, find_moe_blocks

COMMON = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64)


def _models():
    from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM)

    yield "mixtral", MixtralForCausalLM(MixtralConfig(intermediate_size=32, num_local_experts=4,
                                                      num_experts_per_tok=2, **COMMON)), True
    yield "qwen2_moe", Qwen2MoeForCausalLM(Qwen2MoeConfig(moe_intermediate_size=32, intermediate_size=64,
                                                          shared_expert_intermediate_size=32, num_experts=4,
                                                          num_experts_per_tok=2, norm_topk_prob=False,
                                                          **COMMON)), False
    yield "qwen3_moe", Qwen3MoeForCausalLM(Qwen3MoeConfig(moe_intermediate_size=32, num_experts=4,
                                                          num_experts_per_tok=2, norm_topk_prob=True,
                                                          head_dim=8, **COMMON)), True


def test_bf16_swap_reproduces_every_family():
    build, builder_name = build_emulated_moe, "harness.moe"
    torch.manual_seed(0)
    for family, model, renorm in _models():
        model.eval()
        for p in model.parameters():  # non-trivial weights (the default init is tiny)
            torch.nn.init.normal_(p, std=0.2) if p.dim() > 1 else None
        ids = torch.randint(0, 40, (2, 12))
        with torch.no_grad():
            ref = model(input_ids=ids).logits
        specs = find_moe_blocks(model)
        assert len(specs) == 2 and all(s.family == family for s in specs), family
        assert all(s.renormalize == renorm for s in specs), family
        assert all(s.top_k == 2 and s.num_experts == 4 for s in specs)
        sw = Swapper.attach(model)
        sw.build("bf16", build)
        sw.use("bf16")
        with torch.no_grad():
            got = model(input_ids=ids).logits
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4, msg=f"{family} via {builder_name}")
        sw.use(None)
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids=ids).logits, ref, atol=0, rtol=0)


def test_swap_detects_a_wrong_layout():
    """The check above can fail: reading w13 as (up, gate) instead of (gate, up) changes logits."""
    torch.manual_seed(0)
    family, model, _ = next(_models())
    model.eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2) if p.dim() > 1 else None
    ids = torch.randint(0, 40, (2, 12))
    with torch.no_grad():
        ref = model(input_ids=ids).logits

    def swapped_halves(scheme, w13, w2, **kw):
        inter = w2.shape[2]
        return build_emulated_moe(scheme, torch.cat([w13[:, inter:], w13[:, :inter]], dim=1), w2, **kw)

    sw = Swapper.attach(model)
    sw.build("bf16", swapped_halves)
    sw.use("bf16")
    with torch.no_grad():
        got = model(input_ids=ids).logits
    assert (got - ref).abs().max() > 1e-3
