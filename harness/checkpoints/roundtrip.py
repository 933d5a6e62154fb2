"""Round-trip proof: for every expert projection of a checkpoint, the weights
the harness' MoE layer uses (its loader + experts.dequantize_weights) against
the producer's own dequantization of the same file tensors, and, where the
checkpoint has per-expert biases (gpt-oss), the biases the layer adds against
the file's bias columns as the producer's model slices them.

Equality is bit for bit, except for one documented convention difference:
ModelOpt multiplies by its decode-side weight_scale_2 (x * fl(s * ws2)), the
harness divides by the encode-side global scale it loads, gs = fl(1 / ws2)
(x * fl(s / gs), as vLLM and compressed-tensors compute). The two block
multipliers are within 2 ulp of each other (each is s*ws2 with at most two
float32 roundings of relative size 2^-24 between them), so each element may
differ by at most 2 ulp of the multiplier times |x| (x an e2m1 value, an
exact multiple of 0.5 up to 6) plus the product's own rounding: the bound
checked is |h - p| <= 3 ulp(|p|). Any fault this proof exists for (a
multiply for a divide, scales read by value, swapped nibbles, swapped
gate/up halves, another expert's global scale) moves elements by far more.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.checkpoints import detect, files as cfiles, float_experts, producer_dequant
from harness.checkpoints.load import load_checkpoint
from harness.moe.experts import make_experts

# format -> (relative bound in ulp of the producer's value, why); None = bit for bit
BOUNDS = {"modelopt": (3, "ModelOpt x*fl(s*ws2) vs harness x*fl(s/fl(1/ws2)): <= 3 ulp")}


@dataclass
class TensorResult:
    name: str
    elements: int
    differing: int
    max_abs: float
    max_ulp: float
    source_rel_err: float | None = None  # vs the float weights the checkpoint was made from


@dataclass
class RoundTrip:
    fmt: str
    scheme: str
    results: list = field(default_factory=list)
    bound_ulp: int | None = None

    @property
    def failures(self) -> list:
        lim = 0 if self.bound_ulp is None else self.bound_ulp
        return [r for r in self.results if not r.max_ulp <= lim]  # NaN is a failure

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failures

    def summary(self) -> str:
        diff = sum(r.differing for r in self.results)
        n = sum(r.elements for r in self.results)
        worst = max((r.max_ulp for r in self.results), default=0.0)
        rule = "bit for bit" if self.bound_ulp is None else f"<= {self.bound_ulp} ulp"
        bad = ", ".join(r.name for r in self.failures[:3])
        return (f"{self.fmt} {self.scheme}: {len(self.results)} tensors, {n} elements, {diff} differ, worst {worst:g} ulp "
                f"({rule}){': FAIL ' + bad if bad else ''}")


def _ulp(x: torch.Tensor) -> torch.Tensor:
    a = x.abs().to(torch.float32)
    return torch.nextafter(a, torch.full_like(a, float("inf"))) - a


def compare_tensor(name: str, harness: torch.Tensor, producer: torch.Tensor, source=None) -> TensorResult:
    if harness.shape != producer.shape:
        raise ValueError(f"{name}: harness shape {tuple(harness.shape)} vs producer {tuple(producer.shape)}")
    h, p = harness.to(torch.float32), producer.to(torch.float32)
    d = (h - p).abs()
    same = (h == p) | (torch.isnan(h) & torch.isnan(p))
    # a NaN on one side only (e.g. scale bytes read by value: E4M3 0x7f) is infinitely far
    ulps = torch.where(same, torch.zeros_like(d), torch.nan_to_num(d / _ulp(p), nan=float("inf")))
    rel = None
    if source is not None:
        s = source.to(torch.float32)
        rel = float((p - s).norm() / s.norm().clamp_min(1e-30))
    return TensorResult(name, h.numel(), int((~same).sum()), float(d.max()) if d.numel() else 0.0,
                        float(ulps.max()) if ulps.numel() else 0.0, rel)


def _harness_weights(qc):
    return make_experts(qc).dequantize_weights()


def _producer_weights(fmt, ckpt, block, experts_or_names):
    """{(e, proj): float32 [N, K]} by the producer's own dequantization."""
    out = {}
    if fmt == "gpt-oss":
        names = experts_or_names
        gu = producer_dequant.gptoss(ckpt.get(names["gate_up_proj", "blocks"]), ckpt.get(names["gate_up_proj", "scales"]))
        dn = producer_dequant.gptoss(ckpt.get(names["down_proj", "blocks"]), ckpt.get(names["down_proj", "scales"]))
        for e in range(gu.shape[0]):
            out[e, "gate"], out[e, "up"], out[e, "down"] = gu[e, 0::2], gu[e, 1::2], dn[e]
        if ("gate_up_proj", "bias") in names:
            gb, ub = producer_dequant.gptoss_gate_up_bias(ckpt.get(names["gate_up_proj", "bias"]))
            db = ckpt.get(names["down_proj", "bias"]).to(torch.float32)
            for e in range(gb.shape[0]):
                out[e, "gate_bias"], out[e, "up_bias"], out[e, "down_bias"] = gb[e], ub[e], db[e]
        return out
    fn = {"compressed-tensors": producer_dequant.compressed_tensors, "modelopt": producer_dequant.modelopt,
          "quark": producer_dequant.quark}[fmt]
    for e, projs in experts_or_names.items():
        for proj, names in projs.items():
            out[e, proj] = fn(ckpt, names, ckpt.config)
    return out


def _source_weights(base_dir):
    """{(block, e, gate|up|down|gate_bias|up_bias|down_bias): float tensor} of the float model."""
    if base_dir is None:
        return {}
    out = {}
    for block, fe in float_experts.read_folder(base_dir)[2].items():
        parts = {"gate": fe.gate, "up": fe.up, "down": fe.down}
        if fe.has_bias:
            parts.update(gate_bias=fe.gate_bias, up_bias=fe.up_bias, down_bias=fe.down_bias)
        for proj, t in parts.items():
            for e in range(t.shape[0]):
                out[block, e, proj] = t[e]
    return out


def _harness_part(w13, w2, qc, e: int, proj: str, inter: int) -> torch.Tensor:
    return {"gate": lambda: w13[e, :inter], "up": lambda: w13[e, inter:], "down": lambda: w2[e],
            "gate_bias": lambda: qc.w13_bias[e, :inter], "up_bias": lambda: qc.w13_bias[e, inter:],
            "down_bias": lambda: qc.w2_bias[e]}[proj]()


def roundtrip(folder, base_dir=None, producer_files=None) -> RoundTrip:
    """producer_files: what the producer side reads (get(name), keys(), config);
    default the folder through CheckpointFiles, the harness side's reader."""
    loaded = load_checkpoint(folder)
    ckpt = producer_files if producer_files is not None else cfiles.CheckpointFiles(folder)
    groups = detect.reader(loaded.fmt).groups(ckpt.keys())
    bound = BOUNDS.get(loaded.fmt)
    rt = RoundTrip(loaded.fmt, loaded.scheme, bound_ulp=None if bound is None else bound[0])
    source = _source_weights(base_dir)
    for block, qc in loaded.quant_configs.items():
        w13, w2 = _harness_weights(qc)
        inter = w2.shape[2]
        prod = _producer_weights(loaded.fmt, ckpt, block, groups[block])
        have_bias = qc.w13_bias is not None
        if have_bias != any(proj.endswith("_bias") for _, proj in prod):
            raise ValueError(f"{block}: expert biases {'loaded' if have_bias else 'not loaded'} by the harness, "
                             f"{'absent from' if have_bias else 'present in'} the producer's tensors")
        for (e, proj), p in sorted(prod.items()):
            h = _harness_part(w13, w2, qc, e, proj, inter)
            rt.results.append(compare_tensor(f"{block}.experts.{e}.{proj}", h, p, source.get((block, e, proj))))
    return rt
