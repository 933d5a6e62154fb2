"""AMD Quark: LLMTemplate("qwen3_moe") config, ModelQuantizer, freeze, and
`export_safetensors` (its HF format, real_quantized). Quark's own
`preprocess_for_quantization` turns the fused transformers-5 experts into
per-expert Linear layers first (without it nothing is quantized). MXFP8 is
not made: producers.py says why."""
from __future__ import annotations

from pathlib import Path

TEMPLATE_SCHEMES = {"mxfp4": "mxfp4", "mxfp6_e2m3": "mxfp6_e2m3", "mxfp6_e3m2": "mxfp6_e3m2"}
EXCLUDE = ["lm_head", "*.gate", "*self_attn*"]


def make(scheme: str, out_dir: Path, model_dir: Path, texts: list[str]) -> dict:
    import torch
    from quark.torch import LLMTemplate, ModelQuantizer, export_safetensors
    from quark.torch.utils.llm.model_preparation import preprocess_for_quantization
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    preprocess_for_quantization(model)
    calib = [tok(t, return_tensors="pt", add_special_tokens=False)["input_ids"] for t in texts]
    cfg = LLMTemplate.get("qwen3_moe").get_config(scheme=TEMPLATE_SCHEMES[scheme], exclude_layers=EXCLUDE)
    quantizer = ModelQuantizer(cfg)
    model = quantizer.freeze(quantizer.quantize_model(model, calib))
    with torch.no_grad():
        export_safetensors(model, str(out_dir))
    tok.save_pretrained(str(out_dir))
    return {"template_scheme": TEMPLATE_SCHEMES[scheme], "exclude": EXCLUDE}
