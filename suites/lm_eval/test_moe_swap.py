"""The block swap reads each transformers family's expert layout correctly:
with the unquantized scheme the swapped model's logits equal the original's,
and every swapped block equals the transformers block it replaces
(harness.testing.checks.block_swap), for tiny random Mixtral, Qwen2-MoE,
Qwen3-MoE models and the tiny DeepSeek-V3, Llama4 text and gpt-oss models of
harness/models/tiny_families.py (the layouts of the installed transformers)."""

import types

import pytest
import torch

from harness.emulation import families, moe_swap
from harness.emulation.moe_swap import Swapper, find_moe_blocks
from harness.models import tiny_family_make, tiny_families
from harness.moe import build_emulated_moe
from harness.testing.checks.block_swap import block_deviation, check_block_matches

pytestmark = pytest.mark.usefixtures("one_thread")

COMMON = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64)


def _small_model(family: str):
    from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM)

    torch.manual_seed(0)
    if family == "mixtral":
        model = MixtralForCausalLM(MixtralConfig(intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                                                 **COMMON))
    elif family == "qwen2_moe":
        model = Qwen2MoeForCausalLM(Qwen2MoeConfig(moe_intermediate_size=32, intermediate_size=64,
                                                   shared_expert_intermediate_size=32, num_experts=4,
                                                   num_experts_per_tok=2, norm_topk_prob=False, **COMMON))
    else:
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                                   norm_topk_prob=True, head_dim=8, **COMMON))
    for p in model.parameters():  # non-trivial weights (the default init is tiny)
        torch.nn.init.normal_(p, std=0.2) if p.dim() > 1 else None
    return model.eval()


# model_type -> (model maker, MoE blocks, experts, top_k)
MODELS = {
    "mixtral": (lambda: _small_model("mixtral"), 2, 4, 2),
    "qwen2_moe": (lambda: _small_model("qwen2_moe"), 2, 4, 2),
    "qwen3_moe": (lambda: _small_model("qwen3_moe"), 2, 4, 2),
    "deepseek_v3": (lambda: tiny_family_make.build_model("tiny-deepseek_v3"), 1, 8, 2),  # layer 0 dense
    "llama4_text": (lambda: tiny_family_make.build_model("tiny-llama4_text"), 2, 8, 1),
    "gpt_oss": (lambda: tiny_family_make.build_model("tiny-gpt_oss"), 2, 8, 2),
}


def _ids(model, n=2, length=24):
    return torch.randint(0, model.config.vocab_size, (n, length), generator=torch.Generator().manual_seed(1))


def _block_inputs(model, specs, ids):
    """The hidden states each MoE block sees in the original model's forward."""
    seen, hooks = {}, []
    for s in specs:
        def hook(module, args, name=s.name):
            seen[name] = args[0].detach().clone()
        hooks.append(model.get_submodule(s.name).register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_every_tiny_family_has_a_family_row():
    assert set(r.model_type for r in tiny_families.TINY_FAMILIES.values()) <= set(families.MODEL_TYPES)
    assert set(MODELS) == set(families.MODEL_TYPES)


@pytest.mark.parametrize("family", list(MODELS))
def test_bf16_swap_reproduces_the_model(family):
    make, n_blocks, n_experts, top_k = MODELS[family]
    model = make()
    ids = _ids(model)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    specs = find_moe_blocks(model)
    assert len(specs) == n_blocks and all(s.family == family for s in specs), [s.name for s in specs]
    assert all(s.top_k == top_k and s.num_experts == n_experts for s in specs)
    sw = Swapper.attach(model)
    sw.build("bf16", build_emulated_moe)
    sw.use("bf16")
    with torch.no_grad():
        got = model(input_ids=ids).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4, msg=family)
    sw.use(None)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, ref, atol=0, rtol=0)


@pytest.mark.parametrize("family", list(MODELS))
def test_every_block_matches_transformers(family):
    """Block by block, on the hidden states the original model feeds it and on
    wider random ones: the bf16 swap equals the transformers block."""
    model = MODELS[family][0]()
    specs = find_moe_blocks(model)
    inputs = _block_inputs(model, specs, _ids(model, n=4, length=32))
    sw = Swapper.attach(model)
    sw.build("bf16", build_emulated_moe)
    g = torch.Generator().manual_seed(2)
    for s in specs:
        x = inputs[s.name]
        wide = torch.randn(1, 128, x.shape[-1], generator=g) * 2
        for h in (x, wide):
            check_block_matches(sw.originals[s.name], sw.built["bf16"][s.name], h, s.name)


def test_gate_up_deinterleaved_the_wrong_way_is_caught(monkeypatch):
    """The check above can fail: gpt-oss's interleaved gate/up columns read as
    (up, gate) put every token's output far outside the bound."""
    from harness.emulation import moe_swap

    def wrong_way(t, dim):
        n = t.shape[dim]
        return t.index_select(dim, torch.cat([torch.arange(1, n, 2), torch.arange(0, n, 2)]))

    monkeypatch.setattr(moe_swap, "deinterleave", wrong_way)
    model = MODELS["gpt_oss"][0]()
    specs = find_moe_blocks(model)
    inputs = _block_inputs(model, specs, _ids(model, n=4, length=32))
    sw = Swapper.attach(model)
    sw.build("bf16", build_emulated_moe)
    d = block_deviation(sw.originals[specs[0].name], sw.built["bf16"][specs[0].name], inputs[specs[0].name])
    assert d["tokens_outside"] == d["tokens"] and d["max_ratio"] > 100, d
    with pytest.raises(AssertionError, match="layout or routing was misread"):
        check_block_matches(sw.originals[specs[0].name], sw.built["bf16"][specs[0].name], inputs[specs[0].name])


def test_swap_detects_a_wrong_layout():
    """Reading w13 as (up, gate) instead of (gate, up) changes logits."""
    model = _small_model("mixtral")
    ids = _ids(model)
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


def test_unknown_model_type_is_refused_naming_the_known_ones():
    model = _small_model("mixtral")
    model.config.model_type = "olmoe"
    with pytest.raises(TypeError, match="model_type 'olmoe' has no MoE family row.*deepseek_v3"):
        find_moe_blocks(model)


def _gpt_oss_experts(model):
    return [m for n, m in model.named_modules() if n.endswith("mlp.experts")]


def test_gpt_oss_swiglu_constants_are_checked():
    """The experts module's alpha / limit are what its forward computes: a value
    other than the layer's is refused naming where it was read."""
    model = MODELS["gpt_oss"][0]()
    _gpt_oss_experts(model)[-1].limit = 8.0
    with pytest.raises(TypeError, match=r"mlp\.experts\.limit = 8\.0"):
        find_moe_blocks(model)


def test_gpt_oss_swiglu_constants_fall_back_to_the_config():
    """A transformers whose experts keep no alpha (or whose config has no
    swiglu_alpha, as 4.x) is read from the other; neither is a refusal."""
    model = MODELS["gpt_oss"][0]()
    for ex in _gpt_oss_experts(model):
        del ex.alpha
    assert find_moe_blocks(model)  # config.swiglu_alpha 1.702 answers
    model.config.swiglu_alpha = 2.0
    with pytest.raises(TypeError, match=r"config\.swiglu_alpha = 2\.0"):
        find_moe_blocks(model)
    # neither: a config without the attribute (transformers 4.x), experts without alpha
    block = next(m for n, m in model.named_modules() if n.endswith(".mlp"))
    bare = types.SimpleNamespace(swiglu_limit=7.0)
    with pytest.raises(TypeError, match=r"config\.swiglu_alpha = None"):
        moe_swap._activation(families.FAMILIES["gpt_oss"], bare, "model.layers.0.mlp", block)
