"""Where each transformers MoE family keeps the parts of its sparse-MoE
block, one row per `config.model_type`, read from the installed transformers
5.24 source (models/<family>/modeling_<family>.py). The block swap
(moe_swap.py) reads these rows and never a family's name.

Layout facts the rows encode (E experts, H hidden, I expert intermediate):

- mixtral, qwen2_moe, qwen3_moe, deepseek_v3: `experts.gate_up_proj`
  [E, 2I, H] (the gate's I rows, then the up projection's: HF splits with
  `chunk(2)`), `experts.down_proj` [E, H, I]; used as `x @ W.T`.
- llama4_text, gpt_oss: stored transposed, `gate_up_proj` [E, H, 2I] and
  `down_proj` [E, I, H]; used as `x @ W`. Llama4 splits the 2I columns with
  `chunk(2)` (gate then up); gpt-oss INTERLEAVES them (gate = columns 0, 2,
  4, ..., up = columns 1, 3, 5, ...; `gate_up[..., ::2]`, `[..., 1::2]`) and
  its `gate_up_proj_bias` [E, 2I] the same way; `down_proj_bias` [E, H] is
  added before the routing weight.
- Routers: `gate.weight` [E, H] (mixtral, qwen*, deepseek_v3; DeepSeek's is
  kept in float32 and its logits are computed in float32),
  `router.weight` [E, H] (llama4_text, gpt_oss; gpt-oss adds `router.bias`).
  Mixtral always renormalizes the top-k softmax, Qwen when
  `norm_topk_prob`. DeepSeek-V3: sigmoid scores, choice on score +
  `gate.e_score_correction_bias`, restricted to the `topk_group` of `n_group`
  groups with the largest top-2 score sums, weights = the chosen (uncorrected)
  scores, renormalized when `norm_topk_prob`, times `routed_scaling_factor`.
  Llama4: top-k of the logits, weight sigmoid(logit), multiplied into the
  expert's INPUT (top_k is 1), no renormalization. gpt-oss: softmax over the
  top-k logits only.
- Activations: `config.hidden_act` (silu: silu(gate) * up) except gpt-oss,
  whose experts ignore it: clamped SwiGLU with alpha 1.702 and limit 7, read
  from the experts module (`alpha`, `limit`: what its forward uses) or, where
  it has none, from `config.swiglu_alpha` / `config.swiglu_limit`.
- Shared experts: DeepSeek `shared_experts` and Llama4 `shared_expert` are
  dense gate_proj / up_proj / down_proj MLPs on the block input, added to the
  routed sum; they go into the emulation layer (shared_w13 gate-then-up,
  shared_w2). Qwen2-MoE's `shared_expert` is scaled by
  sigmoid(`shared_expert_gate`(x)), which the layer has no option for: it stays
  a module outside the layer, unquantized (as vLLM runs it outside FusedMoE).
- Dense layers: DeepSeek's first `first_k_dense_replace` layers, Llama4's
  layers outside `moe_layers` and Qwen2-MoE's `mlp_only_layers` are plain MLP
  classes, never the row's block class, so they are never swapped.
- Llama4TextMoe and GptOssMLP return (hidden, router tensor) and their decoder
  layers unpack it; the swapped block returns the same pair.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FromConfig:
    """An option whose value is the (text) config's attribute `attr`."""

    attr: str


@dataclass(frozen=True)
class Family:
    model_type: str
    block_class: str                  # type(module).__name__ of the sparse-MoE block
    router: str                       # block attribute holding the router (its `weight` is [E, H])
    scoring: str                      # harness.moe scoring: softmax | sigmoid | softmax_topk
    renormalize: bool | FromConfig
    experts: str = "experts"
    gate_up: str = "gate_up_proj"
    down: str = "down_proj"
    transposed: bool = False          # [E, H, 2I] / [E, I, H], used as x @ W
    interleaved: bool = False         # gate/up alternate along the 2I axis
    gate_up_bias: str | None = None   # experts attribute [E, 2I], same order as gate_up
    down_bias: str | None = None      # experts attribute [E, H]
    router_bias: str | None = None    # router attribute [E], added to the logits
    router_fp32: bool = False         # logits computed in float32 whatever the model dtype
    correction_bias: str | None = None  # router attribute [E]: e_score_correction_bias
    n_group: FromConfig | None = None
    topk_group: FromConfig | None = None
    routed_scaling_factor: FromConfig | None = None
    weight_on_input: bool = False     # routing weight multiplies the expert input (top_k 1)
    activation: str | None = None     # None: config.hidden_act through HIDDEN_ACTS
    # (experts attribute, config attribute, harness.moe constant name) the activation fixes: the
    # experts module's value is what its forward computes (transformers 4.x keeps gpt-oss' alpha
    # there alone); the config's is read where the module has none
    activation_params: tuple = ()
    shared: str | None = None         # block attribute: dense MLP on the block input
    shared_gate: str | None = None    # block attribute: sigmoid gate of the shared MLP (kept as a module)
    shared_names: tuple = ("gate_proj", "up_proj", "down_proj")
    returns_router: bool = False      # forward returns (hidden, router tensor)


TOP_K = FromConfig("num_experts_per_tok")

# config.hidden_act -> harness.moe activation (gate-then-up form)
HIDDEN_ACTS = {"silu": "silu", "swish": "silu"}

# transformers 4.x per-expert ModuleLists: (gate, up, down) attribute names
PER_EXPERT_NAMES = (("w1", "w3", "w2"), ("gate_proj", "up_proj", "down_proj"))

FAMILIES = {f.model_type: f for f in (
    Family("mixtral", "MixtralSparseMoeBlock", router="gate", scoring="softmax", renormalize=True),
    Family("qwen2_moe", "Qwen2MoeSparseMoeBlock", router="gate", scoring="softmax",
           renormalize=FromConfig("norm_topk_prob"), shared="shared_expert", shared_gate="shared_expert_gate"),
    Family("qwen3_moe", "Qwen3MoeSparseMoeBlock", router="gate", scoring="softmax",
           renormalize=FromConfig("norm_topk_prob")),
    Family("deepseek_v3", "DeepseekV3MoE", router="gate", scoring="sigmoid",
           renormalize=FromConfig("norm_topk_prob"), router_fp32=True,
           correction_bias="e_score_correction_bias", n_group=FromConfig("n_group"),
           topk_group=FromConfig("topk_group"), routed_scaling_factor=FromConfig("routed_scaling_factor"),
           shared="shared_experts"),
    Family("llama4_text", "Llama4TextMoe", router="router", scoring="sigmoid", renormalize=False,
           transposed=True, weight_on_input=True, shared="shared_expert", returns_router=True),
    Family("gpt_oss", "GptOssMLP", router="router", scoring="softmax_topk", renormalize=False,
           transposed=True, interleaved=True, gate_up_bias="gate_up_proj_bias", down_bias="down_proj_bias",
           router_bias="bias", activation="swiglu_clamp",
           activation_params=(("alpha", "swiglu_alpha", "SWIGLU_ALPHA"), ("limit", "swiglu_limit", "SWIGLU_LIMIT")),
           returns_router=True),
)}

MODEL_TYPES = tuple(FAMILIES)


def text_config(config):
    """The config that describes the decoder (a multimodal config's text part)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def family_of(config, what: str) -> Family:
    """The row for `config.model_type` (or its text config's); TypeError naming
    `what` and the known model types otherwise."""
    if config is None:
        raise TypeError(f"{what}: no config, so no model_type to find its MoE layout by")
    for cfg in (config, text_config(config)):
        row = FAMILIES.get(getattr(cfg, "model_type", None))
        if row is not None:
            return row
    raise TypeError(f"{what}: model_type {getattr(config, 'model_type', None)!r} has no MoE family row "
                    f"(harness/emulation/families.py knows {', '.join(MODEL_TYPES)})")


def resolve(value, config, what: str):
    """A row option's value: the constant itself, or the config attribute it names."""
    if not isinstance(value, FromConfig):
        return value
    cfg = text_config(config)
    if not hasattr(cfg, value.attr):
        raise TypeError(f"{what}: config has no {value.attr!r}")
    return getattr(cfg, value.attr)
