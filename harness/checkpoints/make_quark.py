"""AMD Quark: LLMTemplate("qwen3_moe") config, ModelQuantizer, freeze, and
`export_safetensors` (its HF format, real_quantized). Quark's own
`preprocess_for_quantization` turns the fused transformers-5 experts into
per-expert Linear layers first (without it nothing is quantized). MXFP8 has
no template scheme, so one is registered from Quark's OCP_MXFP8E4M3Spec
(weights only, as the harness' w_mxfp8 scheme)."""
from __future__ import annotations

from pathlib import Path

TEMPLATE_SCHEMES = {"mxfp4": "mxfp4", "mxfp6_e2m3": "mxfp6_e2m3", "mxfp6_e3m2": "mxfp6_e3m2",
                    "mxfp8": "moe_harness_mxfp8_weight_only"}
EXCLUDE = ["lm_head", "*.gate", "*self_attn*"]


def _template():
    from quark.torch import LLMTemplate
    from quark.torch.quantization.config.config import OCP_MXFP8E4M3Spec, QLayerConfig
    from quark.torch.quantization.config.template import QuantizationScheme

    class _Mxfp8WeightOnly(QuantizationScheme):
        @property
        def config(self):
            return QLayerConfig(weight=OCP_MXFP8E4M3Spec(ch_axis=-1, is_dynamic=False).to_quantization_spec())

    tmpl = LLMTemplate.get("qwen3_moe")
    if TEMPLATE_SCHEMES["mxfp8"] not in tmpl._schemes:
        tmpl.register_scheme(TEMPLATE_SCHEMES["mxfp8"], _Mxfp8WeightOnly())
    return tmpl


def make(scheme: str, out_dir: Path, model_dir: Path, texts: list[str]) -> dict:
    import torch
    from quark.torch import ModelQuantizer, export_safetensors
    from quark.torch.utils.llm.model_preparation import preprocess_for_quantization
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    preprocess_for_quantization(model)
    calib = [tok(t, return_tensors="pt", add_special_tokens=False)["input_ids"] for t in texts]
    cfg = _template().get_config(scheme=TEMPLATE_SCHEMES[scheme], exclude_layers=EXCLUDE)
    quantizer = ModelQuantizer(cfg)
    model = quantizer.freeze(quantizer.quantize_model(model, calib))
    with torch.no_grad():
        export_safetensors(model, str(out_dir))
    tok.save_pretrained(str(out_dir))
    return {"template_scheme": TEMPLATE_SCHEMES[scheme], "exclude": EXCLUDE}
