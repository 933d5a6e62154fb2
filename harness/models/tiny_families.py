"""Tiny RANDOM models of the MoE families the bundled tiny model does not
cover (DeepSeek-V3, Llama4 text, gpt-oss): transformers' own config class and
`from_config` initialisation, seeded, hidden 64, 8 experts, 2 layers, the
bundled tokenizer's 25-token vocabulary (so the local arithmetic tasks run).
They are untrained: what they measure is that the emulated model equals its
certified oracle (KL exactly 0), not accuracy.

Made on first use into the harness cache,
$MOE_HARNESS_CACHE_DIR (else ~/.cache/moe-harness)/tiny-models/<name>-<key>/,
where <key> hashes the row, the seed and the torch and transformers versions
(a different initialiser makes a different folder, never a stale one);
harness/models/tiny_family_make.py makes them. This module stays torch-free:
config validation resolves model names through it.

Shapes: every GEMM K dimension (hidden 64, expert and shared intermediate 64)
is a multiple of every block size in the spec (16, 32).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.models import corpus

SEED = corpus.DEFAULT_SEED
MARKER = "made.json"


@dataclass(frozen=True)
class TinyFamily:
    model_type: str
    config_class: str      # transformers config class
    arch: dict             # its keyword arguments (vocabulary and special tokens come from the tokenizer)
    schemes: tuple         # the schemes its accuracy configs (tiny-<model_type>-<scheme>.yaml) run
    # (name suffix, std): tensors redrawn from the same seeded generator after
    # from_config: the ones transformers initialises to ZERO (biases,
    # DeepSeek's e_score_correction_bias; a zero bias cannot show a dropped
    # bias), and gpt-oss's gate_up weights, wide enough that the SwiGLU clamp
    # at 7 is reached.
    redraw: tuple = ()

    @property
    def name(self) -> str:
        return f"tiny-{self.model_type}"


COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256,
              tie_word_embeddings=False, initializer_range=0.1)

TINY_FAMILIES = {f.name: f for f in (
    # 8 experts in 4 groups, 2 groups kept, top-2: the group limit decides
    # many tokens' experts. Layer 0 is dense (first_k_dense_replace 1), layer 1
    # is the MoE block with one shared expert. MLA attention with small ranks.
    TinyFamily("deepseek_v3", "DeepseekV3Config", dict(
        COMMON, num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=64, n_routed_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
        norm_topk_prob=True, routed_scaling_factor=2.5, q_lora_rank=32, kv_lora_rank=32,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, rope_interleave=True),
        schemes=("nvfp4", "w_mxfp4_a_mxfp4"), redraw=(("e_score_correction_bias", 0.1),)),
    # top-1 with the router weight on the expert input, a shared expert in
    # every layer (both layers MoE).
    TinyFamily("llama4_text", "Llama4TextConfig", dict(
        COMMON, num_key_value_heads=2, head_dim=16, intermediate_size=64, intermediate_size_mlp=128,
        num_local_experts=8, num_experts_per_tok=1, interleave_moe_layer_step=1, attention_chunk_size=256),
        schemes=("nvfp4", "w_mxfp4_a_mxfp4")),
    # interleaved gate/up with biases, router bias, clamped SwiGLU.
    TinyFamily("gpt_oss", "GptOssConfig", dict(
        COMMON, num_key_value_heads=2, head_dim=16, intermediate_size=64, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=64, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        schemes=("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp4"),
        redraw=(("gate_up_proj", 0.6), ("gate_up_proj_bias", 0.5), ("down_proj_bias", 0.1))),
)}

MODEL_NAMES = tuple(TINY_FAMILIES)


def cache_root() -> Path:
    env = os.environ.get("MOE_HARNESS_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "moe-harness"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def recipe(name: str) -> dict:
    """Everything that determines the model's bytes (hashed into its folder name)."""
    row = TINY_FAMILIES[name]
    return {"name": name, "model_type": row.model_type, "config_class": row.config_class, "arch": row.arch,
            "redraw": [list(r) for r in row.redraw], "seed": SEED,
            "torch": _version("torch"), "transformers": _version("transformers")}


def folder(name: str) -> Path:
    if name not in TINY_FAMILIES:
        raise ValueError(f"unknown tiny family model {name!r}; known: {', '.join(MODEL_NAMES)}")
    key = hashlib.sha256(json.dumps(recipe(name), sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / "tiny-models" / f"{name}-{key}"


def name_of(model) -> str | None:
    """The tiny family model that `model` (a model name or a folder) names, else None."""
    if model in TINY_FAMILIES:
        return model
    path = Path(os.path.expanduser(str(model))) if model else None
    return next((n for n in MODEL_NAMES if path is not None and path == folder(n)), None)


def is_made(path) -> bool:
    return (Path(path) / MARKER).is_file()
