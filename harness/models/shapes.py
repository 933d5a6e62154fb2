"""Real MoE model shapes (the fields of their HF config.json) and what they
weigh on paper: in bf16, and as the harness' emulation holds them on a device
(one uint8 code per element, one scale byte per block, fp32 global scales,
everything outside the experts in bf16; the fused backend adds its kernel
format, kernel_expert_bytes_per_layer, and a fused layer built with
keep_codes=False holds released_expert_bytes_per_layer less).

Families beyond Mixtral / Qwen3-MoE add terms through fields that default to
none: a shared expert (quantized like the routed experts, so counted with
them), dense first layers (DeepSeek's first_k_dense_replace), MLA attention,
attention biases and sinks, per-expert biases, a router bias and DeepSeek's
router correction bias (float32 on disk). `config_extra` holds the rest of a
real config.json (rope scaling, sliding windows): facts written into the
synthetic config, not used in the sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.kernels import fp4_words
from harness.kernels.launch_config import scale_order, read_k

GiB = 1 << 30


@dataclass(frozen=True)
class Shape:
    name: str
    family: str            # "mixtral" | "qwen3_moe" | "deepseek_v3" | "llama4_text" | "gpt_oss"
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
    # -- terms of the families beyond mixtral / qwen3_moe (0 / False: none) -----------
    shared_intermediate: int = 0   # one shared expert MLP per MoE layer, quantized like the routed experts
    dense_layers: int = 0          # the first layers have a dense MLP instead (DeepSeek first_k_dense_replace)
    dense_intermediate: int = 0    # that dense MLP's intermediate size
    mla: tuple = ()                # DeepSeek MLA: (q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
    attention_bias: bool = False   # q/k/v/o biases (gpt-oss)
    sinks: bool = False            # one attention sink per head (gpt-oss)
    expert_bias: bool = False      # per-expert gate_up [E, 2I] and down [E, H] biases (gpt-oss)
    router_bias: bool = False      # router bias [E] (gpt-oss)
    correction_bias: bool = False  # router e_score_correction_bias [E], float32 (DeepSeek-V3)
    config_extra: dict = field(default_factory=dict, compare=False)  # more of the real config.json

    # -- parameter counts ------------------------------------------------------------
    @property
    def expert_params_per_layer(self) -> int:
        """Routed experts and the shared expert (quantized alike) of one MoE layer."""
        return 3 * self.hidden * (self.experts * self.moe_intermediate + self.shared_intermediate)

    @property
    def attention_params_per_layer(self) -> int:
        """Attention and the layer's two norms."""
        H = self.hidden
        norms = 2 * H + (2 * self.head_dim if self.family == "qwen3_moe" else 0)
        if self.mla:
            q_lora, kv_lora, nope, rope, v = self.mla
            return (H * q_lora + q_lora + q_lora * self.heads * (nope + rope)   # q_a, its norm, q_b
                    + H * (kv_lora + rope) + kv_lora + kv_lora * self.heads * (nope + v)  # kv_a, its norm, kv_b
                    + self.heads * v * H + norms)                                # o_proj
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        bias = (q + 2 * kv + H) if self.attention_bias else 0  # q, k, v, o biases
        return H * (2 * q + 2 * kv) + norms + bias + (self.heads if self.sinks else 0)

    @property
    def router_params_per_layer(self) -> int:
        """The MoE block's float tensors: router weight (and bias, correction bias), expert biases."""
        E = self.experts
        return (E * self.hidden + E * self.router_bias + E * self.correction_bias
                + (E * (2 * self.moe_intermediate + self.hidden) if self.expert_bias else 0))

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers

    @property
    def dense_layer_params(self) -> int:
        """One dense first layer: attention, norms and its MLP."""
        return self.attention_params_per_layer + 3 * self.hidden * self.dense_intermediate

    @property
    def outer_params(self) -> int:
        return 2 * self.vocab * self.hidden + self.hidden  # embed, lm_head (untied), final norm

    @property
    def params(self) -> int:
        per_layer = self.expert_params_per_layer + self.attention_params_per_layer + self.router_params_per_layer
        return self.moe_layers * per_layer + self.dense_layers * self.dense_layer_params + self.outer_params

    # -- bytes ------------------------------------------------------------------------
    def bf16_bytes(self) -> int:
        return 2 * self.params

    def emulated_expert_bytes_per_layer(self, block: int) -> int:
        """codes (1 B/element) + block scales (1 B/block) + per-expert global scales."""
        n = self.expert_params_per_layer
        return n + n // block + (2 * 4 * self.experts if block == 16 else 0)

    def expert_tensors(self, fp4: bool = True, mma: bool = False) -> list:
        """(count, N, K, read K) of each weight tensor of one MoE layer: w13
        [2I, H] and w2 [H, I] of the routed experts and of the shared expert;
        the K a GEMM reads each row to (launch_config.read_k) for e2m1 words
        in the "mma" order where `mma` (MX on CUDA: launch_config.word_order)
        and K allows it."""
        out = []
        for count, inter in ((self.experts, self.moe_intermediate), (1, self.shared_intermediate)):
            for n, k in ((2 * inter, self.hidden), (self.hidden, inter)):
                if count and inter:
                    order = "mma" if fp4 and mma and k % fp4_words.GROUP == 0 else "k"
                    out.append((count, n, k, read_k(order, k)))
        return out

    def reordered_scale_bytes_per_layer(self, block: int, *, fp4: bool = True, mma: bool = False,
                                        stored: bool = False) -> int:
        """The block scale bytes of one MoE layer of which the fused kernel
        format holds its own copy beside the quant config's: where it stores
        them in its own order (launch_config.scale_order "n": long K loops
        whose rows of K / block bytes are not a multiple of 16) or with slack
        after them for rows read past K (expert_tensors' read K). `stored`:
        the copy's bytes (with the slack: the last row's blocks past K, in
        order "n" N bytes for each), else the config's it stands for."""
        total = 0
        for count, n, k, kr in self.expert_tensors(fp4, mma):
            n_order = scale_order(n, k, block) == "n"
            if n_order or kr != k:
                total += count * n * k // block
                if stored:
                    total += (kr - k) // block * (n if n_order else 1)
        return total

    def kernel_expert_bytes_per_layer(self, block: int, *, fp4: bool = True, mma: bool = False) -> int:
        """What the fused backend holds per layer on top of the quant config's
        tensors (kernels/fused_weights.FusedWeights): fp4 codes eight to a
        32-bit word, half a byte each, with the slack after each tensor
        whose rows are read past K (the last row's codes past K:
        expert_tensors), and its own copy of scale bytes
        (reordered_scale_bytes_per_layer). The kernel format shares the rest
        with the config: the code tensor of wider formats, the other block
        scale bytes and the global scales."""
        codes = sum(count * n * k // 2 + (kr - k) // 2 for count, n, k, kr in self.expert_tensors(fp4, mma)) \
            if fp4 else 0
        return codes + self.reordered_scale_bytes_per_layer(block, fp4=fp4, mma=mma, stored=True)

    def released_expert_bytes_per_layer(self, block: int, *, fp4: bool = True, mma: bool = False) -> int:
        """What a fused layer built with keep_codes=False no longer holds per
        layer (harness.moe.experts): the unpacked codes (1 B/element) when they
        are fp4 (the kernel format packs its own copy; other widths' kernel
        format IS the code tensor, which stays), and the config's scale bytes
        where the kernel holds them in its own order. The other scale bytes and
        the global scales stay: the kernel decodes its multipliers from them."""
        n = self.expert_params_per_layer
        return (n if fp4 else 0) + self.reordered_scale_bytes_per_layer(block, fp4=fp4, mma=mma)

    def expert_layer_bytes(self, block: int, *, fused: bool = False, fp4: bool = True,
                           keep_codes: bool = True, mma: bool = False) -> int:
        """The experts of one layer as the emulation holds them: the quant
        config's tensors, plus the kernel format when fused (`mma`: e2m1
        words in the "mma" order, expert_tensors), less the released codes
        when keep_codes=False (fused only, as the layer refuses it unfused)."""
        if not keep_codes and not fused:
            raise ValueError("keep_codes=False needs the fused backend (the unfused backend reads the codes)")
        kernel = self.kernel_expert_bytes_per_layer(block, fp4=fp4, mma=mma) if fused else 0
        released = 0 if keep_codes else self.released_expert_bytes_per_layer(block, fp4=fp4, mma=mma)
        return self.emulated_expert_bytes_per_layer(block) + kernel - released

    def emulated_layer_bytes(self, block: int, *, fused: bool = False, fp4: bool = True,
                             keep_codes: bool = True, mma: bool = False) -> int:
        return (self.expert_layer_bytes(block, fused=fused, fp4=fp4, keep_codes=keep_codes, mma=mma)
                + 2 * (self.attention_params_per_layer + self.router_params_per_layer))

    def emulated_bytes(self, block: int, *, fused: bool = False, fp4: bool = True,
                       keep_codes: bool = True, mma: bool = False) -> int:
        return (self.moe_layers * self.emulated_layer_bytes(block, fused=fused, fp4=fp4, keep_codes=keep_codes,
                                                            mma=mma)
                + 2 * (self.outer_params + self.dense_layers * self.dense_layer_params))

    def disk_bytes(self, block: int) -> int:
        """The checkpoint on disk: packed fp4 (2 elements a byte), scale bytes, fp32 global and input scales
        (one pair per projection of every routed and shared expert), bf16 elsewhere, the correction bias fp32."""
        n = self.moe_layers * self.expert_params_per_layer
        projections = 3 * (self.experts + (1 if self.shared_intermediate else 0))
        gs = self.moe_layers * projections * 8 if block == 16 else 0
        dense = (self.moe_layers * (self.attention_params_per_layer + self.router_params_per_layer)
                 + self.dense_layers * self.dense_layer_params + self.outer_params)
        fp32 = self.moe_layers * self.experts if self.correction_bias else 0
        return n // 2 + n // block + gs + 2 * dense + 2 * fp32

    def hf_config(self) -> dict:
        common = dict(vocab_size=self.vocab, hidden_size=self.hidden, num_hidden_layers=self.layers,
                      num_attention_heads=self.heads, num_key_value_heads=self.kv_heads, head_dim=self.head_dim,
                      num_experts_per_tok=self.top_k, max_position_embeddings=self.max_position,
                      rope_theta=self.rope_theta, rms_norm_eps=self.rms_eps, tie_word_embeddings=False,
                      hidden_act="silu", torch_dtype="bfloat16", bos_token_id=0, eos_token_id=0, pad_token_id=1)
        if self.family in NEW_FAMILY_CONFIGS:
            common.pop("rope_theta")
            if self.mla:
                common.pop("head_dim")  # MLA: transformers derives it (qk_rope_head_dim)
            rope = {"rope_type": "default", "rope_theta": self.rope_theta}
            return {**common, "rope_parameters": rope, **NEW_FAMILY_CONFIGS[self.family](self), **self.config_extra}
        if self.family == "mixtral":
            return dict(common, model_type="mixtral", architectures=["MixtralForCausalLM"],
                        intermediate_size=self.moe_intermediate, num_local_experts=self.experts,
                        sliding_window=None, router_aux_loss_coef=0.02)
        return dict(common, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
                    moe_intermediate_size=self.moe_intermediate, intermediate_size=8 * self.moe_intermediate,
                    num_experts=self.experts, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                    attention_bias=False, router_aux_loss_coef=0.001)


def _deepseek_v3(s: Shape) -> dict:
    q_lora, kv_lora, nope, rope, v = s.mla
    return dict(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"],
                intermediate_size=s.dense_intermediate, moe_intermediate_size=s.moe_intermediate,
                n_routed_experts=s.experts, n_shared_experts=s.shared_intermediate // s.moe_intermediate,
                first_k_dense_replace=s.dense_layers, moe_layer_freq=1, norm_topk_prob=True,
                q_lora_rank=q_lora, kv_lora_rank=kv_lora, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                v_head_dim=v, topk_method="noaux_tc", scoring_func="sigmoid", attention_bias=False)


def _llama4_text(s: Shape) -> dict:
    moe = list(range(s.dense_layers, s.layers))
    return dict(model_type="llama4_text", architectures=["Llama4ForCausalLM"], intermediate_size=s.moe_intermediate,
                num_local_experts=s.experts, interleave_moe_layer_step=1, moe_layers=moe, use_qk_norm=True,
                attention_bias=False)


def _gpt_oss(s: Shape) -> dict:
    return dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"], intermediate_size=s.moe_intermediate,
                num_local_experts=s.experts, attention_bias=True, swiglu_limit=7.0, router_aux_loss_coef=0.9,
                layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(s.layers)])


# config.json fields of the families beyond mixtral / qwen3_moe (the Shape's own terms;
# config_extra adds the rest of the real config and wins)
NEW_FAMILY_CONFIGS = {"deepseek_v3": _deepseek_v3, "llama4_text": _llama4_text, "gpt_oss": _gpt_oss}


def _from_new_family(cfg: dict, name: str) -> Shape:
    mt, heads = cfg["model_type"], cfg["num_attention_heads"]
    rope = cfg.get("rope_parameters") or {}
    common = dict(name=name, family=mt, vocab=cfg["vocab_size"], hidden=cfg["hidden_size"],
                  layers=cfg["num_hidden_layers"], heads=heads, kv_heads=cfg.get("num_key_value_heads", heads),
                  top_k=cfg["num_experts_per_tok"], max_position=cfg.get("max_position_embeddings", 0),
                  rope_theta=rope.get("rope_theta", cfg.get("rope_theta", 0.0)), rms_eps=cfg.get("rms_norm_eps", 0.0))
    if mt == "deepseek_v3":
        return Shape(**common, head_dim=cfg["qk_rope_head_dim"], moe_intermediate=cfg["moe_intermediate_size"],
                     experts=cfg["n_routed_experts"],
                     shared_intermediate=cfg.get("n_shared_experts", 0) * cfg["moe_intermediate_size"],
                     dense_layers=cfg.get("first_k_dense_replace", 0), dense_intermediate=cfg["intermediate_size"],
                     mla=(cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                          cfg["v_head_dim"]), correction_bias=True)
    if mt == "llama4_text":
        moe = cfg.get("moe_layers", list(range(cfg["num_hidden_layers"])))
        if moe != list(range(cfg["num_hidden_layers"] - len(moe), cfg["num_hidden_layers"])):
            raise ValueError(f"config.json moe_layers {moe}: shapes know MoE in every layer (Llama-4-Scout) only")
        return Shape(**common, head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
                     moe_intermediate=cfg["intermediate_size"], experts=cfg["num_local_experts"],
                     shared_intermediate=cfg["intermediate_size"])
    return Shape(**common, head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
                 moe_intermediate=cfg["intermediate_size"], experts=cfg["num_local_experts"],
                 attention_bias=True, sinks=True, expert_bias=True, router_bias=True)


def from_hf_config(cfg: dict, name: str = "checkpoint") -> Shape:
    """The Shape of a Mixtral / Qwen3-MoE / DeepSeek-V3 / Llama-4 text / gpt-oss config.json (synthetic or real)."""
    mt = cfg.get("model_type")
    if mt in NEW_FAMILY_CONFIGS:
        return _from_new_family(cfg, name)
    if mt not in ("mixtral", "qwen3_moe"):
        raise ValueError(f"config.json model_type {mt!r}: shapes are known for mixtral, qwen3_moe, "
                         f"{', '.join(NEW_FAMILY_CONFIGS)}")
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
    # DeepSeek-V3 (config.json of deepseek-ai/DeepSeek-V3) with 5 of its 61 layers: the 3 dense first
    # layers and 2 MoE layers, every layer its real shape (MLA, 256 experts top-8 in 8 groups, 1 shared expert)
    Shape("deepseek-v3-5layers", "deepseek_v3", 129280, 7168, 5, 128, 128, 64, 2048, 256, 8, 163840, 10000.0, 1e-6,
          note="5 of DeepSeek-V3's 61 layers (3 dense + 2 MoE), each at its real shape; no MTP layer",
          shared_intermediate=2048, dense_layers=3, dense_intermediate=18432, mla=(1536, 512, 128, 64, 128),
          correction_bias=True,
          config_extra=dict(n_group=8, topk_group=4, routed_scaling_factor=2.5, num_nextn_predict_layers=0,
                            rope_parameters={"rope_type": "yarn", "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                             "mscale": 1.0, "mscale_all_dim": 1.0,
                                             "original_max_position_embeddings": 4096, "rope_theta": 10000.0})),
    # Llama-4-Scout-17B-16E's text model (its text_config): MoE in every layer, 1 shared expert
    Shape("llama-4-scout", "llama4_text", 202048, 5120, 48, 40, 8, 128, 8192, 16, 1, 10485760, 500000.0, 1e-5,
          note="the text model of Llama-4-Scout-17B-16E (no vision tower)", shared_intermediate=8192,
          config_extra=dict(intermediate_size_mlp=16384, attention_chunk_size=8192, no_rope_layer_interval=4,
                            attn_temperature_tuning=True, floor_scale=8192, attn_scale=0.1,
                            rope_parameters={"rope_type": "llama3", "factor": 16.0, "high_freq_factor": 1.0,
                                             "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                                             "rope_theta": 500000.0})),
    Shape("gpt-oss-120b", "gpt_oss", 201088, 2880, 36, 64, 8, 64, 2880, 128, 4, 131072, 150000.0, 1e-5,
          note="the gpt-oss MXFP4 layout; its reader runs it as w_mxfp4 (W4A16, as gpt-oss runs)",
          attention_bias=True, sinks=True, expert_bias=True, router_bias=True,
          config_extra=dict(sliding_window=128, swiglu_limit=7.0, initial_context_length=4096,
                            rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                             "truncate": False, "original_max_position_embeddings": 4096,
                                             "rope_theta": 150000.0})),
    Shape("tiny-deepseek-v3", "deepseek_v3", 32, 64, 3, 4, 4, 16, 64, 8, 2, 256, 1e4, 1e-6,
          shared_intermediate=64, dense_layers=1, dense_intermediate=128, mla=(32, 32, 16, 16, 16),
          correction_bias=True, config_extra=dict(n_group=4, topk_group=2, routed_scaling_factor=2.5,
                                                  num_nextn_predict_layers=0)),
    Shape("tiny-llama4", "llama4_text", 32, 64, 2, 4, 2, 16, 64, 4, 1, 256, 1e4, 1e-5, shared_intermediate=64,
          config_extra=dict(intermediate_size_mlp=128, attention_chunk_size=256)),
    Shape("tiny-gpt-oss", "gpt_oss", 32, 64, 2, 4, 2, 16, 64, 4, 2, 256, 1e4, 1e-5,
          attention_bias=True, sinks=True, expert_bias=True, router_bias=True,
          config_extra=dict(sliding_window=64, swiglu_limit=7.0)),
    # the bundled tiny MoE's shapes (harness/models/tiny_model.py), for checkpoints paired with it
    Shape("tiny-moe", "qwen3_moe", 25, 64, 3, 4, 4, 16, 64, 8, 2, 256, 1e4, 1e-6),
)}


def get_shape(name: str) -> Shape:
    if name not in SHAPES:
        raise ValueError(f"unknown shape {name!r}; known: {', '.join(SHAPES)}")
    return SHAPES[name]
