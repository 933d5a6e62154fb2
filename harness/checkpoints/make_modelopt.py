"""NVIDIA ModelOpt: mtq.quantize with NVFP4_DEFAULT_CFG (max calibration over
the calibration text) and export_hf_checkpoint. Runs on CPU (measured with
nvidia-modelopt 0.47.0: fake-quant calibration and export need no GPU).
ModelOpt quantizes the fused transformers-5 experts itself
(QuantQwen3MoeExperts) and exports them per expert. Attention and dense
MLPs (DeepSeek's first_k_dense_replace layers, `<layer>.mlp.gate_proj`) are
disabled here as in the other makers: the harness emulates the MoE experts
only. The routed experts (`mlp.experts.<e>.*`) and a shared expert
(`mlp.shared_experts.*`) are quantized, as NVIDIA's DeepSeek-R1 NVFP4 export
quantizes them."""
from __future__ import annotations

import copy
from pathlib import Path

DISABLED = ["*self_attn*", "*.mlp.gate_proj*", "*.mlp.up_proj*", "*.mlp.down_proj*"]


def make(scheme: str, out_dir: Path, model_dir: Path, texts: list[str]) -> dict:
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    cfg = copy.deepcopy(mtq.NVFP4_DEFAULT_CFG)
    cfg["quant_cfg"] = list(cfg["quant_cfg"]) + [{"quantizer_name": p, "enable": False} for p in DISABLED]
    calib = [tok(t, return_tensors="pt", add_special_tokens=False)["input_ids"] for t in texts]

    def forward_loop(m):
        with torch.no_grad():
            for ids in calib:
                m(ids)

    model = mtq.quantize(model, cfg, forward_loop)
    export_hf_checkpoint(model, export_dir=str(out_dir))
    tok.save_pretrained(str(out_dir))
    return {"config": "NVFP4_DEFAULT_CFG", "disabled": DISABLED}
