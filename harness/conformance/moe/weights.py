"""The weights handed to an MoE implementation's `build`: vLLM's FusedMoE
parameter names and layouts, in the implementation's declared conventions.

E experts, hidden H, intermediate I, block B of the weight format:

    w13_weight         uint8 [E, 2I, H/2] fp4 codes two per byte, low nibble =
                       element 2i (packing "packed"), or [E, 2I, H] one code per
                       byte in the element's own bit layout (packing "unpacked";
                       fp6 / fp8 codes are always one per byte)
    w13_weight_scale   [E, 2I, H/B]: float8_e4m3fn block scales (two-level,
                       NVFP4) or uint8 E8M0 bytes (MX)
    w2_weight          uint8 [E, H, I/2] or [E, H, I]
    w2_weight_scale    [E, H, I/B]
    w13 rows: gate rows 0..I-1 then up rows I..2I-1 (gate_up "concatenated"),
    or gate i at row 2i and up i at row 2i+1 (gate_up "interleaved", gpt-oss);
    the block scales' rows follow the weights'.

Two-level schemes (NVFP4: value = e2m1 * fl32(s / gs), gs per expert):

    global_scale "decode" (ModelOpt names):
        w13_weight_scale_2   float32 [E] = 1 / gs13[e]       (weight value = e2m1 * s * scale_2)
        w13_input_scale      float32 [E]; the activation global scale (encode
                             side) is 1 / max_e w13_input_scale[e]
        w2_weight_scale_2, w2_input_scale likewise
    global_scale "encode" (compressed-tensors names):
        w13_weight_global_scale  float32 [E] = gs13[e]
        w13_input_global_scale   float32 [E]; the activation global scale is
                                 min_e w13_input_global_scale[e]
        w2_weight_global_scale, w2_input_global_scale likewise

Per-tensor fp8 activations (w_mxfp4_a_fp8): w13_input_scale / w2_input_scale,
float32 scalars, decode side (x ~= e4m3(x / s) * s). Weight-only and MX
activations have no activation scales.
"""
from __future__ import annotations

import torch

import harness.formats as hf
from harness.moe.schemes import get_scheme
from harness.testing.checks.problem import Truth


F32, F64 = torch.float32, torch.float64

# Every name a FusedMoE layer can carry here; anything else is not an attribute of one.
NAMES = ("w13_weight", "w13_weight_scale", "w13_weight_scale_2", "w13_weight_global_scale", "w13_input_scale",
         "w13_input_global_scale", "w2_weight", "w2_weight_scale", "w2_weight_scale_2", "w2_weight_global_scale",
         "w2_input_scale", "w2_input_global_scale")


class MoEWeights(torch.nn.Module):
    """A layer object with ONLY the MoE parameters (like vLLM's FusedMoE as
    process_weights_after_loading sees it: no `.weight`). Also readable as a
    mapping: weights["w13_weight"], "w13_input_scale" in weights, weights.items()."""

    def __init__(self, tensors: dict):
        super().__init__()
        for k, v in tensors.items():
            if k not in NAMES:
                raise ValueError(f"MoEWeights: unknown parameter name {k!r}; expected one of {NAMES}")
            self.register_parameter(k, torch.nn.Parameter(v, requires_grad=False))

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            raise AttributeError(f"a FusedMoE layer has no attribute {name!r} (its parameters: "
                                 f"{', '.join(self._parameters)})") from None

    def __getitem__(self, name) -> torch.Tensor:
        if name not in self._parameters:
            raise KeyError(f"no MoE parameter {name!r} (present: {', '.join(self._parameters)})")
        return self._parameters[name]

    def __contains__(self, name) -> bool:
        return name in self._parameters

    def get(self, name, default=None):
        return self._parameters.get(name, default)

    def keys(self):
        return list(self._parameters)

    def items(self):
        return list(self._parameters.items())

    @property
    def device(self) -> torch.device:
        return self._parameters["w13_weight"].device


def interleave_gate_up(t: torch.Tensor) -> torch.Tensor:
    """[E, 2I, ...] gate rows then up rows -> gate i at 2i, up i at 2i+1."""
    E, two_i = t.shape[:2]
    i = torch.arange(two_i // 2)
    return t[:, torch.stack([i, i + two_i // 2], dim=1).reshape(-1)]


def _input_spread(E: int, seed: int) -> torch.Tensor:
    """Per-expert factors in [0.5, 1], 1.0 at one expert (so the max / min over
    experts is exactly the layer's scale), in a seeded order."""
    return torch.linspace(1.0, 0.5, E, dtype=F64)[torch.randperm(E, generator=torch.Generator().manual_seed(seed))]


def _recip(v: torch.Tensor) -> torch.Tensor:
    return (1.0 / v.double()).to(F32)


def vllm_weights(p, truth: Truth, conventions: dict, device="cpu") -> dict:
    """The truth's weights and scales as vLLM's MoE parameters (module docstring)."""
    scheme = get_scheme(p.scheme)
    spec = hf.FORMATS[scheme.weight_fmt]
    interleave = conventions.get("gate_up") == "interleaved"
    packed = conventions.get("packing", "packed") == "packed"

    def codes(c):
        return hf.pack_fp4(c) if (spec.is_fp4 and packed) else c

    def scales(s):
        return s.view(getattr(torch, spec.scale.torch_dtype)) if spec.has_global_scale else s

    c13, s13 = truth.w13_q.codes, truth.w13_q.scales
    if interleave:
        c13, s13 = interleave_gate_up(c13), interleave_gate_up(s13)
    d = {"w13_weight": codes(c13), "w13_weight_scale": scales(s13),
         "w2_weight": codes(truth.w2_q.codes), "w2_weight_scale": scales(truth.w2_q.scales)}
    if spec.has_global_scale:
        spread = _input_spread(truth.w13_gscale.shape[0], p.seed)
        if conventions.get("global_scale") == "encode":
            d["w13_weight_global_scale"], d["w2_weight_global_scale"] = truth.w13_gscale, truth.w2_gscale
            if truth.a1_gscale is not None:
                d["w13_input_global_scale"] = (truth.a1_gscale.double() / spread).to(F32)
                d["w2_input_global_scale"] = (truth.a2_gscale.double() / spread).to(F32)
        else:
            d["w13_weight_scale_2"], d["w2_weight_scale_2"] = _recip(truth.w13_gscale), _recip(truth.w2_gscale)
            if truth.a1_gscale is not None:
                d["w13_input_scale"] = (spread / truth.a1_gscale.double()).to(F32)
                d["w2_input_scale"] = (spread / truth.a2_gscale.double()).to(F32)
    elif truth.a1_scale is not None:
        d["w13_input_scale"], d["w2_input_scale"] = truth.a1_scale, truth.a2_scale
    # Copies: an implementation that writes into its weights must not reach the truth.
    return {k: v.detach().to(device).clone(memory_format=torch.contiguous_format) for k, v in d.items()}


def recovered_truth(truth: Truth, conventions: dict) -> Truth:
    """The encode-side global scales an implementation recovers from the
    weights it is handed: under "decode" that is fl32(1 / fl32(1 / gs)),
    which is gs itself for the powers of two the problems use, and for a
    perturbed scale (scale_use's x3) the value the layer can know."""
    if truth.w13_gscale is None or conventions.get("global_scale") == "encode":
        return truth
    out = Truth(**vars(truth))
    for name in ("w13_gscale", "w2_gscale", "a1_gscale", "a2_gscale"):
        v = getattr(truth, name)
        if v is not None:
            setattr(out, name, _recip(_recip(v)))
    return out


def permute_experts(weights: dict, perm: torch.Tensor) -> dict:
    """Expert e of the result is expert perm[e] of `weights` (every per-expert
    tensor is indexed on dim 0; per-tensor scalars are kept)."""
    E = weights["w13_weight"].shape[0]
    return {k: (v[perm.to(v.device)].contiguous() if v.dim() >= 1 and v.shape[0] == E else v)
            for k, v in weights.items()}
