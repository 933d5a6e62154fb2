"""Static activation calibration for two-level schemes such as NVFP4
(encode-side global scales).

Runs the unquantized model over a calibration set with forward pre-hooks on
every sparse-MoE block and records, per block:
  a1_amax = max |input to the MoE block|            (input of the w13 GEMM)
  a2_amax = max |silu(gate) * up| over routed tokens (input of the w2 GEMM)
The global scales are gs = gs_numerator/amax of the scheme's activation
format (448*6/amax for nvfp4; harness.formats.nvfp4_global_scale).

Calibration set (documented in docs/lm_eval.md): `corpus.calibration_texts`,
64 documents of 8 training-distribution equations each, seeded, disjoint from
every task item. A checkpoint may instead ship `activation_amax.json`
({block name: {"a1_amax": float, "a2_amax": float}}) in its folder; when
present it is used as is (source "checkpoint").
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from harness.emulation.moe_swap import MoEBlockSpec
from harness.formats import nvfp4_global_scale

AMAX_FILE = "activation_amax.json"


def global_scale(amax: float, fmt=None) -> torch.Tensor:
    """Encode-side global scale of the two-level format `fmt` (nvfp4 when None)."""
    return nvfp4_global_scale(torch.tensor(float(amax), dtype=torch.float32), fmt)


def _routed_intermediate_amax(spec: MoEBlockSpec, h: torch.Tensor) -> float:
    logits = torch.nn.functional.linear(h, spec.router_weight.to(h.dtype)).float()
    top = torch.topk(torch.softmax(logits, dim=-1), spec.top_k, dim=-1).indices
    inter = spec.intermediate
    amax = 0.0
    for e in range(spec.num_experts):
        rows = (top == e).any(dim=-1)
        if not bool(rows.any()):
            continue
        x = h[rows].float()
        w = spec.w13[e].float()
        act = torch.nn.functional.silu(x @ w[:inter].T) * (x @ w[inter:].T)
        amax = max(amax, float(act.abs().max()))
    return amax


@torch.no_grad()
def calibrate_amax(model, swapper, tokenizer, texts, batch_size: int = 16) -> dict[str, dict]:
    """Per-block {"a1_amax", "a2_amax"} from running the ORIGINAL blocks on `texts`."""
    swapper.use(None)
    stats = {s.name: {"a1_amax": 0.0, "a2_amax": 0.0} for s in swapper.specs}
    hooks = []
    for spec in swapper.specs:
        def pre_hook(module, args, spec=spec):
            h = args[0].reshape(-1, args[0].shape[-1])
            st = stats[spec.name]
            st["a1_amax"] = max(st["a1_amax"], float(h.abs().max()))
            st["a2_amax"] = max(st["a2_amax"], _routed_intermediate_amax(spec, h))
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
    return {name: {"a1_gscale": global_scale(st["a1_amax"], fmt), "a2_gscale": global_scale(st["a2_amax"], fmt)}
            for name, st in stats.items()}


def checkpoint_amax(model_dir) -> dict | None:
    path = Path(model_dir) / AMAX_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    for name, st in data.items():
        for key in ("a1_amax", "a2_amax"):
            v = st.get(key) if isinstance(st, dict) else None
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{path}: {name}.{key} must be a positive number, got {v!r}")
    return data
