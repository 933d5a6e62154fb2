"""llmcompressor + compressed-tensors: oneshot with a preset scheme on the
experts' Linear layers, saved compressed (`save_pretrained(save_compressed=True)`).

The Qwen3-MoE experts are fused 3-D parameters in transformers 5; llmcompressor's
own `load_quantizable_moe` loads them as per-expert Linear layers (its
registered qwen3_moe mapping), which is how its MoE examples run. Only the
experts are quantized: attention, router and lm_head stay float, since the
harness emulates the MoE experts only. The tiny DeepSeek-V3 family model
goes the same way (its registered deepseek_v3 mapping): its shared expert is
quantized like the routed experts, as vLLM's compressed-tensors configs of
DeepSeek quantize it; its dense first layer stays float."""
from __future__ import annotations

from pathlib import Path

PRESETS = {"nvfp4": "NVFP4", "mxfp4": "MXFP4"}
# dense MLPs (DeepSeek's first_k_dense_replace layers: <layer>.mlp.gate_proj) stay float like attention;
# routed experts (mlp.experts.<e>.*) and the shared expert (mlp.shared_experts.*) are quantized
IGNORE = ["lm_head", "re:.*mlp\\.gate$", "re:.*self_attn.*", "re:.*\\.mlp\\.(gate|up|down)_proj$"]


def make(scheme: str, out_dir: Path, model_dir: Path, texts: list[str]) -> dict:
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modeling.moe.linearize import load_quantizable_moe
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with load_quantizable_moe():
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ds = Dataset.from_dict({"text": texts}).map(lambda r: tok(r["text"], add_special_tokens=False),
                                                remove_columns=["text"])
    recipe = QuantizationModifier(targets="Linear", scheme=PRESETS[scheme], ignore=IGNORE)
    oneshot(model=model, dataset=ds, recipe=recipe, max_seq_length=128, num_calibration_samples=len(texts))
    model.save_pretrained(str(out_dir), save_compressed=True)
    tok.save_pretrained(str(out_dir))
    return {"preset": PRESETS[scheme], "ignore": IGNORE}
