"""GPU memory of moe-emu on paper, per device: resident weights (as the
emulation holds them) plus the largest transient of a forward, to compare
with torch.cuda.max_memory_allocated (issue #16: within 10%).

Terms (bytes; B rows of T tokens, P = B*T*top_k token/expert pairs):
- weights: for each decoder layer on the device, the emulated layer
  (shapes.Shape.emulated_layer_bytes: uint8 codes, scale bytes, global
  scales, bf16 attention and router); the embedding on the first device,
  final norm and lm_head on the last.
- moe transient (every device holding a layer): the layer's experts
  dequantized to float32 (4 B x 3*E*H*I, what the unfused backend builds per
  forward) plus the float32 GEMM buffers (P x (H + 2*2I + I + H) x 4 B: the
  expanded input, h1 and one expert's product, the activation, h2).
- logits (last device, loglikelihood): B*T*V x (2 + 4 + 4) B: the bf16
  logits, their float32 copy and the float32 log_softmax.
The peak is weights + max(moe transient, logits on the last device).
Attention with SDPA holds no T x T scores; hidden states (B*T*H) are small
next to the terms above and left out: their share shows in the measured ratio.
"""

from __future__ import annotations

from harness.checkpoints.shapes import Shape


def _layer_devices(device_map: dict, layers: int) -> list[str]:
    out = []
    for i in range(layers):
        key = f"model.layers.{i}"
        dev = device_map.get(key, device_map.get("model.layers", device_map.get("model", device_map.get(""))))
        if dev is None:
            raise ValueError(f"device_map places no module for {key}")
        out.append(str(dev))
    return out


def _first_last(device_map: dict) -> tuple[str, str]:
    def find(*keys):
        for k in keys:
            if k in device_map:
                return str(device_map[k])
        raise ValueError(f"device_map has none of {keys}")
    return find("model.embed_tokens", "model", ""), find("lm_head", "")


def per_device(shape: Shape, block: int, device_map: dict, batch: int, seq: int) -> dict:
    """{device: {weights, moe_transient, logits, peak}} in bytes."""
    layer_dev = _layer_devices(device_map, shape.layers)
    first, last = _first_last(device_map)
    devices = sorted(set(layer_dev) | {first, last})
    H, I, E, V = shape.hidden, shape.moe_intermediate, shape.experts, shape.vocab
    P = batch * seq * shape.top_k
    moe = 4 * 3 * E * H * I + 4 * P * (H + 4 * I + I + H)
    logits = batch * seq * V * (2 + 4 + 4)
    out = {}
    for d in devices:
        w = layer_dev.count(d) * shape.emulated_layer_bytes(block)
        w += 2 * V * H if d == first else 0
        w += 2 * V * H + 2 * H if d == last else 0
        m = moe if d in layer_dev else 0
        lg = logits if d == last else 0
        out[d] = {"weights": w, "moe_transient": m, "logits": lg, "peak": w + max(m, lg)}
    return out
