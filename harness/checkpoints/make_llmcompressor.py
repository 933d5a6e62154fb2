"""llmcompressor + compressed-tensors: oneshot with a preset scheme on the
experts' Linear layers, saved compressed (`save_pretrained(save_compressed=True)`).

The Qwen3-MoE experts are fused 3-D parameters in transformers 5; llmcompressor's
own `load_quantizable_moe` loads them as per-expert Linear layers (its
registered qwen3_moe mapping), which is how its MoE examples run. Only the
experts are quantized: attention, router and lm_head stay float, since the
harness emulates the MoE experts only. The tiny DeepSeek-V3 family model
goes the same way (its registered deepseek_v3 mapping): its shared expert is
quantized like the routed experts, as vLLM's compressed-tensors configs of
DeepSeek quantize it; its dense first layer stays float. The tiny Llama4
text model too (its registered llama4 mapping, as RedHatAI's Llama-4-Scout
NVFP4 is made): routed experts and the shared expert quantized, the router
float. llmcompressor 0.14.0.1's Llama4 linearization reads
`config.text_config` (it expects the multimodal Llama4Config); a text-only
model's config is its own text config, so while the model loads its config
class answers `text_config` with itself (`_text_config_is_itself`); nothing
else of llmcompressor is touched."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

PRESETS = {"nvfp4": "NVFP4", "mxfp4": "MXFP4"}
# dense MLPs (DeepSeek's first_k_dense_replace layers: <layer>.mlp.gate_proj) stay float like attention;
# routed experts (mlp.experts.<e>.*) and the shared expert (mlp.shared_experts.*) are quantized
IGNORE = ["lm_head", "re:.*mlp\\.gate$", "re:.*self_attn.*", "re:.*\\.mlp\\.(gate|up|down)_proj$",
          # Llama4: the router and a dense layer's MLP (`feed_forward.gate_proj`) stay float
          "re:.*feed_forward\\.router$", "re:.*\\.feed_forward\\.(gate|up|down)_proj$"]


@contextmanager
def _text_config_is_itself(model_dir: Path):
    """A text-only Llama4 config answers `text_config` with itself while inside
    (llmcompressor's Llama4 linearization reads it); other models: no change."""
    from transformers import AutoConfig
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig

    if AutoConfig.from_pretrained(str(model_dir)).model_type != "llama4_text" or \
            "text_config" in vars(Llama4TextConfig):
        yield
        return
    Llama4TextConfig.text_config = property(lambda self: self)
    try:
        yield
    finally:
        del Llama4TextConfig.text_config


def make(scheme: str, out_dir: Path, model_dir: Path, texts: list[str]) -> dict:
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modeling.moe.linearize import load_quantizable_moe
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _text_config_is_itself(model_dir), load_quantizable_moe():
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ds = Dataset.from_dict({"text": texts}).map(lambda r: tok(r["text"], add_special_tokens=False),
                                                remove_columns=["text"])
    recipe = QuantizationModifier(targets="Linear", scheme=PRESETS[scheme], ignore=IGNORE)
    oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=128, num_calibration_samples=len(texts))
    model.save_pretrained(str(out_dir), save_compressed=True)
    tok.save_pretrained(str(out_dir))
    return {"preset": PRESETS[scheme], "ignore": IGNORE}
