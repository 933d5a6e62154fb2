"""The gpt-oss MXFP4 layout, written by the harness' own quantizer.

No producer library converts a float checkpoint to this layout on a CPU
(transformers' Mxfp4HfQuantizer quantizes with triton_kernels on a GPU; the
gpt-oss package ships no quantizer), so the harness writes it and the proof
is that transformers' reader (`convert_moe_packed_tensors`) gives the same
weights as the harness' loader. The layout, as transformers reads it:

  model.layers.L.mlp.experts.gate_up_proj_blocks  uint8 [E, 2I, H/32, 16]
  model.layers.L.mlp.experts.gate_up_proj_scales  uint8 [E, 2I, H/32]  (E8M0 byte)
  model.layers.L.mlp.experts.down_proj_blocks     uint8 [E, H, I/32, 16]
  model.layers.L.mlp.experts.down_proj_scales     uint8 [E, H, I/32]

two fp4 codes per byte, low nibble first; gate_up rows interleaved (row 2j is
gate j, row 2j+1 is up j); config.json quantization_config
{"quant_method": "mxfp4"}. No expert biases (the tiny model has none)."""
from __future__ import annotations

import json
import re
from pathlib import Path
import harness.formats as hf

SCALE_MODE = "even"   # the harness' w_mxfp4 weight scale mode (harness/moe/schemes.py)
NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.gate", "model.embed_tokens", "lm_head"]
_EXPERT = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def _quantize_rows(w):
    q = hf.quantize(w.float(), "mxfp4", scale_mode=SCALE_MODE, rounding="rne")
    packed = hf.pack_fp4(q.codes)
    return packed.reshape(*q.scales.shape, -1), q.scales


def make(scheme: str, out_dir: Path, model_dir: Path, texts: list[str]) -> dict:
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    src = load_file(str(Path(model_dir) / "model.safetensors"))
    experts, out = {}, {}
    for k, v in src.items():
        m = _EXPERT.match(k)
        if m:
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
        else:
            out[k] = v
    for prefix, per in experts.items():
        ids = sorted(per)
        gate = torch.stack([per[e]["gate_proj"] for e in ids])
        up = torch.stack([per[e]["up_proj"] for e in ids])
        gate_up = torch.stack([gate, up], dim=2).reshape(gate.shape[0], -1, gate.shape[2])  # interleave rows
        down = torch.stack([per[e]["down_proj"] for e in ids])
        for name, w in (("gate_up_proj", gate_up), ("down_proj", down)):
            out[f"{prefix}.{name}_blocks"], out[f"{prefix}.{name}_scales"] = _quantize_rows(w)
    save_file({k: v.contiguous() for k, v in out.items()}, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": NOT_CONVERTED}
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for f in Path(model_dir).glob("tokenizer*.json"):
        shutil.copy(f, out_dir / f.name)
    return {"writer": "harness.formats.quantize", "scale_mode": SCALE_MODE, "rounding": "rne"}
