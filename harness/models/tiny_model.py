"""The bundled tiny MoE model: a Qwen3-MoE causal LM small enough for CPU CI.

Shapes are chosen so every block size in the spec divides both GEMM K
dimensions: hidden 64 and moe_intermediate 64 are multiples of 16 and 32.
"""

from __future__ import annotations

from pathlib import Path

from harness.models import tokenizer as tok

# The name a config or --model gives for the bundled tiny model.
BUNDLED_MODEL_NAME = "tiny-moe"

BUNDLED_DIR = Path(__file__).resolve().parent / "tiny_moe"

ARCH = dict(
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=4,
    head_dim=16,
    moe_intermediate_size=64,
    intermediate_size=128,  # unused: every layer is sparse
    num_experts=8,
    num_experts_per_tok=2,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    router_aux_loss_coef=0.01,
)


def make_config(**overrides):
    from transformers import Qwen3MoeConfig

    vocab = tok.vocab()
    kwargs = dict(ARCH)
    kwargs.update(overrides)
    return Qwen3MoeConfig(
        vocab_size=len(vocab),
        eos_token_id=vocab[tok.EOS],
        bos_token_id=vocab[tok.EOS],
        pad_token_id=vocab[tok.PAD],
        **kwargs,
    )


def bundled_dir() -> Path:
    return BUNDLED_DIR


def is_bundled_present(folder=None) -> bool:
    folder = Path(folder) if folder else BUNDLED_DIR
    return (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
