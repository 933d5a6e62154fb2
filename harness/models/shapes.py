"""Real MoE model shapes (the fields of their HF config.json) and what they
weigh on paper: in bf16, and as the harness' emulation holds them on a device
(one uint8 code per element, one scale byte per block, fp32 global scales,
everything outside the experts in bf16; the fused backend adds its kernel
format, kernel_expert_bytes_per_layer, and a fused layer built with
keep_codes=False holds released_expert_bytes_per_layer less)."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30


@dataclass(frozen=True)
class Shape:
    name: str
    family: str            # "mixtral" | "qwen3_moe"
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    moe_intermediate: int
    experts: int
    top_k: int
    max_position: int
    rope_theta: float
    rms_eps: float
    note: str = ""

    # -- parameter counts ------------------------------------------------------------
    @property
    def expert_params_per_layer(self) -> int:
        return self.experts * 3 * self.hidden * self.moe_intermediate

    @property
    def attention_params_per_layer(self) -> int:
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        norms = 2 * self.hidden + (2 * self.head_dim if self.family == "qwen3_moe" else 0)
        return self.hidden * (2 * q + 2 * kv) + norms

    @property
    def router_params_per_layer(self) -> int:
        return self.experts * self.hidden

    @property
    def outer_params(self) -> int:
        return 2 * self.vocab * self.hidden + self.hidden  # embed, lm_head (untied), final norm

    @property
    def params(self) -> int:
        per_layer = self.expert_params_per_layer + self.attention_params_per_layer + self.router_params_per_layer
        return self.layers * per_layer + self.outer_params

    # -- bytes ------------------------------------------------------------------------
    def bf16_bytes(self) -> int:
        return 2 * self.params

    def emulated_expert_bytes_per_layer(self, block: int) -> int:
        """codes (1 B/element) + block scales (1 B/block) + per-expert global scales."""
        n = self.expert_params_per_layer
        return n + n // block + (2 * 4 * self.experts if block == 16 else 0)

    def kernel_expert_bytes_per_layer(self, block: int, *, fp4: bool = True, post: bool = False) -> int:
        """What the fused backend holds per layer on top of those codes
        (kernels/fused_weights.FusedWeights): fp4 codes packed two a byte (other
        widths share the code tensor), one float32 multiplier per block for the
        precision the layer runs, and with `post` (two-level rows in "bf16") a
        float32 1/gs per expert for each of w13 and w2."""
        n = self.expert_params_per_layer
        return (n // 2 if fp4 else 0) + 4 * (n // block) + (2 * 4 * self.experts if post else 0)

    def released_expert_bytes_per_layer(self, block: int, *, fp4: bool = True) -> int:
        """What a fused layer built with keep_codes=False no longer holds per
        layer (harness.moe.experts): the unpacked codes (1 B/element) when they
        are fp4 (the kernel format packs its own copy; other widths' kernel
        format IS the code tensor, which stays) and the block scale bytes
        (1 B/block; the kernel keeps its float32 multipliers)."""
        n = self.expert_params_per_layer
        return (n if fp4 else 0) + n // block

    def expert_layer_bytes(self, block: int, *, fused: bool = False, fp4: bool = True, post: bool = False,
                           keep_codes: bool = True) -> int:
        """The experts of one layer as the emulation holds them: the quant
        config's tensors, plus the kernel format when fused, less the released
        codes when keep_codes=False (fused only, as the layer refuses it unfused)."""
        if not keep_codes and not fused:
            raise ValueError("keep_codes=False needs the fused backend (the unfused backend reads the codes)")
        kernel = self.kernel_expert_bytes_per_layer(block, fp4=fp4, post=post) if fused else 0
        released = 0 if keep_codes else self.released_expert_bytes_per_layer(block, fp4=fp4)
        return self.emulated_expert_bytes_per_layer(block) + kernel - released

    def emulated_layer_bytes(self, block: int, *, fused: bool = False, fp4: bool = True, post: bool = False,
                             keep_codes: bool = True) -> int:
        return (self.expert_layer_bytes(block, fused=fused, fp4=fp4, post=post, keep_codes=keep_codes)
                + 2 * (self.attention_params_per_layer + self.router_params_per_layer))

    def emulated_bytes(self, block: int, *, fused: bool = False, fp4: bool = True, post: bool = False,
                       keep_codes: bool = True) -> int:
        return (self.layers * self.emulated_layer_bytes(block, fused=fused, fp4=fp4, post=post, keep_codes=keep_codes)
                + 2 * self.outer_params)

    def disk_bytes(self, block: int) -> int:
        """The checkpoint on disk: packed fp4 (2 elements a byte), scale bytes, fp32 global and input scales."""
        n = self.layers * self.expert_params_per_layer
        gs = self.layers * self.experts * 3 * 8 if block == 16 else 0
        dense = self.layers * (self.attention_params_per_layer + self.router_params_per_layer) + self.outer_params
        return n // 2 + n // block + gs + 2 * dense

    def hf_config(self) -> dict:
        common = dict(vocab_size=self.vocab, hidden_size=self.hidden, num_hidden_layers=self.layers,
                      num_attention_heads=self.heads, num_key_value_heads=self.kv_heads, head_dim=self.head_dim,
                      num_experts_per_tok=self.top_k, max_position_embeddings=self.max_position,
                      rope_theta=self.rope_theta, rms_norm_eps=self.rms_eps, tie_word_embeddings=False,
                      hidden_act="silu", torch_dtype="bfloat16", bos_token_id=0, eos_token_id=0, pad_token_id=1)
        if self.family == "mixtral":
            return dict(common, model_type="mixtral", architectures=["MixtralForCausalLM"],
                        intermediate_size=self.moe_intermediate, num_local_experts=self.experts,
                        sliding_window=None, router_aux_loss_coef=0.02)
        return dict(common, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
                    moe_intermediate_size=self.moe_intermediate, intermediate_size=8 * self.moe_intermediate,
                    num_experts=self.experts, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                    attention_bias=False, router_aux_loss_coef=0.001)


def from_hf_config(cfg: dict, name: str = "checkpoint") -> Shape:
    """The Shape of a Mixtral / Qwen3-MoE config.json (synthetic or real)."""
    mt = cfg.get("model_type")
    if mt not in ("mixtral", "qwen3_moe"):
        raise ValueError(f"config.json model_type {mt!r}: shapes are known for mixtral and qwen3_moe")
    heads = cfg["num_attention_heads"]
    return Shape(name, mt, cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"], heads,
                 cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or cfg["hidden_size"] // heads,
                 cfg["intermediate_size"] if mt == "mixtral" else cfg["moe_intermediate_size"],
                 cfg["num_local_experts"] if mt == "mixtral" else cfg["num_experts"], cfg["num_experts_per_tok"],
                 cfg.get("max_position_embeddings", 0), cfg.get("rope_theta", 0.0), cfg.get("rms_norm_eps", 0.0))


SHAPES = {s.name: s for s in (
    Shape("mixtral-8x7b", "mixtral", 32000, 4096, 32, 32, 8, 128, 14336, 8, 2, 32768, 1e6, 1e-5),
    Shape("qwen3-30b-a3b", "qwen3_moe", 151936, 2048, 48, 32, 4, 128, 768, 128, 8, 40960, 1e6, 1e-6),
    Shape("mixtral-8x22b", "mixtral", 32768, 6144, 56, 48, 8, 128, 16384, 8, 2, 65536, 1e6, 1e-5,
          note="more than one H200 holds in bf16 and emulated with its codes (fits two); fused without codes fits one (see --plan)"),
    Shape("qwen3-235b-a22b", "qwen3_moe", 151936, 4096, 94, 64, 4, 128, 1536, 128, 8, 40960, 1e6, 1e-6,
          note="emulated, two H200s leave little room for activations; the checkpoint needs > 128 GiB of disk"),
    # CPU tests: same code path, kilobytes
    Shape("tiny-qwen3-moe", "qwen3_moe", 32, 64, 3, 4, 2, 16, 64, 4, 2, 256, 1e4, 1e-6),
    Shape("tiny-mixtral", "mixtral", 32, 64, 2, 4, 2, 16, 64, 4, 2, 256, 1e4, 1e-5),
    # the bundled tiny MoE's shapes (harness/models/tiny_model.py), for checkpoints paired with it
    Shape("tiny-moe", "qwen3_moe", 25, 64, 3, 4, 4, 16, 64, 8, 2, 256, 1e4, 1e-6),
)}


def get_shape(name: str) -> Shape:
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; known: {', '.join(SHAPES)}")
    return SHAPES[name]
