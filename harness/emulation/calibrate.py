"""Static activation calibration for two-level schemes such as NVFP4
(encode-side global scales).

Runs the unquantized model over a calibration set with forward pre-hooks on
every sparse-MoE block; each hook runs the block's input through the block's
unquantized emulation layer (scheme "bf16": the family's routing, biases,
activation and shared expert as the quantized layer has them) and records,
per block, the largest magnitude of the two tensors that layer quantizes:
  a1_amax = max |input of the w13 GEMM|  (the block input; times the routing
            weight where the family applies it to the input)
  a2_amax = max |activation output|      (input of the w2 GEMM, routed pairs)
and, where the layer holds the family's shared expert (a dense MLP quantized
in the same scheme with its own activation scales, as vLLM's shared-expert
linear layers have their own input scales), shared_a1_amax / shared_a2_amax
of the shared MLP's two GEMM inputs.
The global scales are gs = gs_numerator/amax of the scheme's activation
format (448*6/amax for nvfp4; harness.formats.nvfp4_global_scale).

Calibration set (documented in docs/lm_eval.md): `corpus.calibration_texts`,
64 documents of 8 training-distribution equations each, seeded, disjoint from
every task item. A checkpoint may instead ship `activation_amax.json`
({block name: {"a1_amax": float, "a2_amax": float[, "shared_a1_amax",
"shared_a2_amax"]}}) in its folder; when present it is used as is (source
"checkpoint").
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from harness.emulation.moe_swap import EmulatedSparseMoeBlock, MoEBlockSpec
from harness.formats import nvfp4_global_scale
from harness.moe import build_emulated_moe

AMAX_FILE = "activation_amax.json"
AMAX_KEYS = ("a1_amax", "a2_amax", "shared_a1_amax", "shared_a2_amax")  # shared_*: blocks with a shared expert


def global_scale(amax: float, fmt=None) -> torch.Tensor:
    """Encode-side global scale of the two-level format `fmt` (nvfp4 when None)."""
    return nvfp4_global_scale(torch.tensor(float(amax), dtype=torch.float32), fmt)


def _unquantized_block(spec: MoEBlockSpec) -> EmulatedSparseMoeBlock:
    return EmulatedSparseMoeBlock(spec, build_emulated_moe("bf16", spec.w13, spec.w2, top_k=spec.top_k,
                                                           **spec.options), "bf16")


# experts object of the layer -> prefix of its amax keys
TRACED = (("experts", ""), ("shared_experts", "shared_"))


def _gemm_input_amax(block: EmulatedSparseMoeBlock, h: torch.Tensor) -> dict[str, float]:
    """{"a1_amax", "a2_amax"[, "shared_a1_amax", "shared_a2_amax"]} of the
    unquantized layer's forward on h [T, H]: the tensors its QDQs would see."""
    layer = block.emulated
    traced = {prefix: getattr(layer, attr) for attr, prefix in TRACED if getattr(layer, attr, None) is not None}
    seen = {prefix: {} for prefix in traced}
    for prefix, experts in traced.items():
        experts.trace = seen[prefix]
    try:
        layer(h, block.router_logits(h))
    finally:
        for experts in traced.values():
            experts.trace = None
    return {f"{prefix}{key}_amax": float(seen[prefix][src].abs().max())
            for prefix in traced for key, src in (("a1", "a1"), ("a2", "a2_in"))}


@torch.no_grad()
def calibrate_amax(model, swapper, tokenizer, texts, batch_size: int = 16) -> dict[str, dict]:
    """Per-block {"a1_amax", "a2_amax"[, "shared_a1_amax", "shared_a2_amax"]}
    from running the ORIGINAL blocks on `texts`."""
    swapper.use(None)
    stats = {s.name: {} for s in swapper.specs}
    blocks = {s.name: _unquantized_block(s) for s in swapper.specs}
    hooks = []
    for spec in swapper.specs:
        def pre_hook(module, args, spec=spec):
            st = stats[spec.name]
            for key, v in _gemm_input_amax(blocks[spec.name], args[0].reshape(-1, args[0].shape[-1])).items():
                st[key] = max(st.get(key, 0.0), v)
        hooks.append(swapper.originals[spec.name].register_forward_pre_hook(pre_hook))
    device = next(model.parameters()).device
    try:
        for i in range(0, len(texts), batch_size):
            for text in texts[i:i + batch_size]:  # one doc at a time: no padding in the statistics
                ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"].to(device)
                model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    return stats


def scales_from_amax(stats: dict[str, dict], fmt=None) -> dict[str, dict]:
    """Per block, the build_emulated_moe keywords: every "<x>_amax" -> "<x>_gscale"."""
    return {name: {key[:-len("_amax")] + "_gscale": global_scale(v, fmt) for key, v in st.items()}
            for name, st in stats.items()}


def checkpoint_amax(model_dir) -> dict | None:
    path = Path(model_dir) / AMAX_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    for name, st in data.items():
        if not isinstance(st, dict):
            raise ValueError(f"{path}: {name} must be a mapping of amax values, got {st!r}")
        unknown = sorted(set(st) - set(AMAX_KEYS))
        if unknown:
            raise ValueError(f"{path}: {name}.{unknown[0]}: unknown key (known: {', '.join(AMAX_KEYS)})")
        for key in [k for k in AMAX_KEYS if k in st or not k.startswith("shared_")]:
            v = st.get(key)
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{path}: {name}.{key} must be a positive number, got {v!r}")
    return data
