"""The gpt-oss MXFP4 layout, written by the harness' own quantizer.

No producer library converts a float checkpoint to this layout on a CPU
(transformers' Mxfp4HfQuantizer quantizes with triton_kernels on a GPU; the
gpt-oss package ships no quantizer), so the harness writes it and the proof
is that transformers' reader (`convert_moe_packed_tensors`) gives the same
weights as the harness' loader. The layout, as transformers 5.24 reads it
(integrations/mxfp4.py, models/gpt_oss) and vLLM loads it (models/gpt_oss.py):

  <block>.experts.gate_up_proj_blocks  uint8 [E, 2I, H/32, 16]
  <block>.experts.gate_up_proj_scales  uint8 [E, 2I, H/32]  (E8M0 byte)
  <block>.experts.gate_up_proj_bias    float [E, 2I]         (when the model has expert biases)
  <block>.experts.down_proj_blocks     uint8 [E, H, I/32, 16]
  <block>.experts.down_proj_scales     uint8 [E, H, I/32]
  <block>.experts.down_proj_bias       float [E, H]          (when the model has expert biases)

two fp4 codes per byte, low nibble first; gate_up rows INTERLEAVED (row 2j
is gate j, row 2j+1 is up j) and gate_up_proj_bias in the same order;
config.json quantization_config {"quant_method": "mxfp4",
"modules_to_not_convert": [...]}. Biases are written as the float model
holds them (its dtype, unquantized). Every other tensor (attention, the
router's weight and bias, embeddings) is copied from the float model
unchanged.

The float model is either the bundled tiny MoE (per-expert tensors, no
biases) or the tiny gpt_oss family model (its own fused, interleaved layout
with biases); float_experts.py reads both into gate / up / down.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

import harness.formats as hf
from harness.checkpoints import float_experts

SCALE_MODE = "even"   # the harness' w_mxfp4 weight scale mode (harness/moe/schemes.py)
NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.gate", "model.layers.*.mlp.router",
                 "model.embed_tokens", "lm_head"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _quantize_rows(w):
    q = hf.quantize(w.float(), "mxfp4", scale_mode=SCALE_MODE, rounding="rne")
    packed = hf.pack_fp4(q.codes)
    return packed.reshape(*q.scales.shape, -1), q.scales


def interleave(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up [E, I, ...] -> [E, 2I, ...] with gate j at 2j and up j at 2j+1."""
    return torch.stack([gate, up], dim=2).reshape(gate.shape[0], -1, *gate.shape[2:])


def layout_tensors(block: str, fe: float_experts.FloatExperts) -> dict:
    """The gpt-oss layout's tensors of one block."""
    out = {}
    for name, w in (("gate_up_proj", interleave(fe.gate, fe.up)), ("down_proj", fe.down)):
        out[f"{block}.experts.{name}_blocks"], out[f"{block}.experts.{name}_scales"] = _quantize_rows(w)
    if fe.has_bias:
        out[f"{block}.experts.gate_up_proj_bias"] = interleave(fe.gate_bias, fe.up_bias)
        out[f"{block}.experts.down_proj_bias"] = fe.down_bias
    return out


def make(scheme: str, out_dir: Path, model_dir: Path, texts: list[str]) -> dict:
    from safetensors.torch import save_file

    src, cfg, experts = float_experts.read_folder(model_dir)
    used = {n for fe in experts.values() for n in fe.names}
    out = {k: v for k, v in src.items() if k not in used}
    for block, fe in experts.items():
        out.update(layout_tensors(block, fe))
    save_file({k: v.contiguous() for k, v in out.items()}, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": NOT_CONVERTED}
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for name in TOKENIZER_FILES:
        if (Path(model_dir) / name).is_file():
            shutil.copy(Path(model_dir) / name, out_dir / name)
    return {"writer": "harness.formats.quantize", "scale_mode": SCALE_MODE, "rounding": "rne",
            "expert_biases": any(fe.has_bias for fe in experts.values())}
