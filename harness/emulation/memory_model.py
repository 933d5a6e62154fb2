"""GPU memory of moe-emu on paper, per device: resident weights (as the
emulation holds them) plus the largest transient of a forward, to compare
with torch.cuda.max_memory_allocated (the target: within 10%).

Terms (bytes; B rows of T tokens, P = B*T*top_k token/expert pairs, n the
expert weights of a layer, E experts, H hidden, I expert intermediate):
- weights: for each MoE decoder layer on the device, the emulated layer
  (shapes.Shape.emulated_layer_bytes: uint8 codes, scale bytes, global
  scales, bf16 attention and router; backend "fused" adds the kernel format's
  packed fp4 codes (it shares the scale bytes and global scales with the
  config and decodes its multipliers from them), with its own copy of the
  scale bytes it stores in order "n" or with slack after them: MX e2m1 on
  CUDA is read to a multiple of 128 past a ragged K of 2048 and more, each
  tensor holding its last row's reach past K after it (shapes.Shape.
  expert_tensors, launch_config.read_k); a fused layer built with
  keep_codes=False, what the eval builds when no certified oracle is asked
  for (moe_swap.keep_codes_for), holds
  shapes.Shape.released_expert_bytes_per_layer less: no unpacked fp4 codes
  (1 B/element)); the embedding on the first device, final norm and lm_head
  on the last.
- moe transient (every device holding a layer), the live buffers of one
  ExpertsBase.apply at its largest moment:
  - unfused: the layer's experts dequantized to float32 (4 x n) plus the
    float32 GEMM buffers P x (H + 2*2I + I + H) x 4;
  - fused: the largest of its three phases, the float32 pair rows xs (4PH)
    and h1 (8PI) live throughout: GEMM1 adds its operand copy (2PH in bf16,
    4PH in ieee) and, when mode "auto" picks predequant (P >= 128 E rows),
    the dequantized w13 scratch (E*2I*H x 2 or 4); GEMM2 adds the activation,
    its QDQ and operand copy (4PI + 4PI + 2PI|4PI), h2 (4PH) and the w2
    scratch; the top-k sum adds the weighted product (4PH) next to h2.
- logits (loglikelihood, B*T*V elements): the bf16 logits are made on the
  last device (2 B each); accelerate's top hook moves the model's outputs to
  the input (first) device (another 2 B each there when it is another
  device). The adapter normalises only the continuation's positions
  (MoEEmuLM.span_scores), a few rows next to these.
The peak is weights + max(moe transient, the logits term of that device).
Attention with SDPA holds no T x T scores; hidden states (B*T*H) are small
next to the terms above and left out: their share shows in the measured ratio.
"""

from __future__ import annotations

from harness.models.shapes import Shape
from harness.kernels import fp4_words
from harness.kernels.launch_config import PREDEQUANT_MIN_ROWS_PER_EXPERT, vendor_of, word_order
from harness.kernels.precision import resolve_precision
from harness.schemes import get_scheme


def _layer_devices(device_map: dict, layers: int) -> list[str]:
    out = []
    for i in range(layers):
        key = f"model.layers.{i}"
        dev = device_map.get(key, device_map.get("model.layers", device_map.get("model", device_map.get(""))))
        if dev is None:
            raise ValueError(f"device_map places no module for {key}")
        out.append(str(dev))
    return out


def _canonical(dev) -> str:
    """A bare "cuda" (one process, current device 0) is the "cuda:0" that
    torch.cuda.max_memory_allocated is reported under."""
    return "cuda:0" if str(dev) == "cuda" else str(dev)


def _first_last(device_map: dict) -> tuple[str, str]:
    def find(*keys):
        for k in keys:
            if k in device_map:
                return str(device_map[k])
        raise ValueError(f"device_map has none of {keys}")
    return find("model.embed_tokens", "model", ""), find("lm_head", "")


def moe_transient(shape: Shape, scheme, backend: str, P: int, precision: str) -> int:
    """The moe transient term above, bytes."""
    H, I, E = shape.hidden, shape.moe_intermediate, shape.experts
    if backend == "unfused":
        return 4 * 3 * E * H * I + 4 * P * (H + 4 * I + I + H)
    if backend != "fused":
        raise ValueError(f"unknown experts backend {backend!r}; expected unfused or fused")
    op = 2 if precision == "bf16" else 4                  # operand copy / scratch element bytes
    predequant = scheme.weight_fmt is not None and P >= PREDEQUANT_MIN_ROWS_PER_EXPERT * E
    scratch13 = E * 2 * I * H * op if predequant else 0
    scratch2 = E * H * I * op if predequant else 0
    live = 4 * P * H + 8 * P * I                          # xs, h1
    gemm1 = op * P * H + scratch13
    gemm2 = (4 + 4 + op) * P * I + 4 * P * H + scratch2
    topk = (4 + 4) * P * I + 4 * P * H + 4 * P * H
    return live + max(gemm1, gemm2, topk)


def mma_words(fmt: str, device_type: str = "cuda") -> bool:
    """Whether the kernel format of `fmt` on `device_type` holds e2m1 words in
    the "mma" order (MX on CUDA: launch_config.word_order), which are read
    past a ragged long K (launch_config.read_k; shapes.Shape.expert_tensors)."""
    return word_order(vendor_of(device_type), fmt, fp4_words.GROUP) == "mma"


def per_device(shape: Shape, scheme: str, device_map: dict, batch: int, seq: int, *,
               backend: str = "unfused", device_type: str = "cuda", keep_codes: bool = True) -> dict:
    """{device: {weights, moe_transient, logits, peak}} in bytes, for the
    emulated `scheme` (a harness scheme name) under the experts `backend`,
    its fused precision resolved as on `device_type`; keep_codes=False: the
    fused layers released their unpacked codes."""
    s = get_scheme(scheme)
    if s.weight_fmt is None:
        raise ValueError(f"{scheme}: the memory model covers quantized experts only")
    spec = s.weight_spec
    precision = resolve_precision("auto", s, device_type)
    mma = mma_words(spec.name, device_type)
    layer_bytes = shape.emulated_layer_bytes(spec.block_size, fused=backend == "fused", fp4=spec.is_fp4,
                                             keep_codes=keep_codes, mma=mma)
    layer_dev = [_canonical(d) for d in _layer_devices(device_map, shape.layers)]
    # the first shape.dense_layers layers have a dense bf16 MLP (DeepSeek's first_k_dense_replace), the rest MoE
    dense_dev, moe_dev = layer_dev[:shape.dense_layers], layer_dev[shape.dense_layers:]
    dense_bytes = 2 * shape.dense_layer_params
    first, last = (_canonical(d) for d in _first_last(device_map))
    devices = sorted(set(layer_dev) | {first, last})
    H, V = shape.hidden, shape.vocab
    moe = moe_transient(shape, s, backend, batch * seq * shape.top_k, precision)
    n_logits = batch * seq * V
    out = {}
    for d in devices:
        w = moe_dev.count(d) * layer_bytes + dense_dev.count(d) * dense_bytes
        w += 2 * V * H if d == first else 0
        w += 2 * V * H + 2 * H if d == last else 0
        m = moe if d in moe_dev else 0
        lg = 2 * n_logits if d in (first, last) else 0
        out[d] = {"weights": w, "moe_transient": m, "logits": lg, "peak": w + max(m, lg)}
    return out
