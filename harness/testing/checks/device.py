"""Device placement (vLLM #41630 layer weight device, #36993 missing weight
scale): every conversion and weight-creation branch runs with a minimal layer
(only MoE attributes) and leaves its tensors on the weights' device."""
from __future__ import annotations

import dataclasses

import torch

import harness.moe as hm
from harness.strategies import MoEProblem

from harness.testing.checks.problem import checkpoint_tensors, truth_of


def tensors_reachable(obj, depth=3, seen=None):
    """(path, tensor) for every tensor reachable from an object's attributes."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield "", obj
        return
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif isinstance(obj, torch.nn.Module):
        items = list(vars(obj).items()) + list(obj._parameters.items()) + list(obj._buffers.items()) + list(obj._modules.items())
    elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        if type(obj).__module__.startswith(("torch", "builtins", "enum")):
            return
        items = vars(obj).items()
    else:
        return
    for k, v in items:
        for p, tt in tensors_reachable(v, depth - 1, seen):
            yield f".{k}{p}", tt


def check_buffers_follow_weights(moe):
    dev = moe.quant_config.device if moe.quant_config is not None else None
    wrong = [(p, str(x.device)) for p, x in tensors_reachable(moe, depth=4) if x.device != dev]
    assert not wrong, f"buffers not on the weights' device {dev}: {wrong[:6]}"
    return {"device": str(dev)}


class MinimalMoELayer(torch.nn.Module):
    """A layer object with ONLY the MoE attributes (no `.weight`)."""

    def __getattr__(self, name):
        if name == "weight":
            raise AttributeError("a MoE layer has no attribute 'weight' (only w13_weight / w2_weight)")
        return super().__getattr__(name)


def _nvfp4_ckpt_for_conversion(E=2, H=32, I=32, device="cpu", seed=0):
    p = MoEProblem("nvfp4", E, 1, H, I, 2, seed, ckpt="modelopt")
    t = p.tensors()
    d = checkpoint_tensors(p, t, truth_of(p, t))
    return {k: v.to(device) for k, v in d.items()}


def check_conversion_every_backend(device="cpu"):
    """Every backend branch of both kernel-format conversions runs with a
    minimal layer (only MoE attributes), and its outputs live on w13's device."""
    H = hm
    ran = []
    for backend in H.MoEBackend:
        d = _nvfp4_ckpt_for_conversion(device=device)
        layer = MinimalMoELayer()
        layer.w13_weight = torch.nn.Parameter(d["w13_weight"], requires_grad=False)
        layer.w2_weight = torch.nn.Parameter(d["w2_weight"], requires_grad=False)
        try:
            out = H.convert_to_nvfp4_moe_kernel_format(
                layer, d["w13_weight"], d["w13_weight_scale"], d["w13_weight_scale_2"], d["w2_weight"],
                d["w2_weight_scale"], d["w2_weight_scale_2"], d["w13_input_scale"], d["w2_input_scale"], backend)
        except Exception as exc:
            raise AssertionError(f"nvfp4 conversion, backend {backend.name}, minimal layer: {type(exc).__name__}: {exc}") from exc
        wrong = [(p, str(x.device)) for p, x in tensors_reachable(out, depth=4) if x.device != d["w13_weight"].device]
        assert not wrong, f"nvfp4 {backend}: converted tensors off the weights' device: {wrong[:4]}"
        ran.append(("nvfp4", backend))
        for name, scheme in H.SCHEMES.items():
            if scheme.two_level:
                continue
            p = MoEProblem(name, 2, 1, 32, 32, 2, 0)
            t = p.tensors()
            c = {k: v.to(device) for k, v in checkpoint_tensors(p, t, truth_of(p, t)).items()}
            try:
                out = H.convert_to_ocp_mx_moe_kernel_format(layer, c["w13_weight"], c["w13_weight_scale"], c["w2_weight"],
                                                           c["w2_weight_scale"], backend, scheme=name)
            except Exception as exc:
                raise AssertionError(f"{name} conversion, backend {backend.name}, minimal layer: {type(exc).__name__}: {exc}") from exc
            wrong = [(pp, str(x.device)) for pp, x in tensors_reachable(out, depth=4) if x.device != c["w13_weight"].device]
            assert not wrong, f"{name} {backend}: converted tensors off the weights' device: {wrong[:4]}"
            ran.append((name, backend))
    return {"ran": ran}


def check_create_weights_every_scheme(device="cpu"):
    """create_moe_weights + convert_layer_weights for every scheme x backend
    with emulation forced: every branch creates *_weight_scale."""
    H = hm
    for name in H.SCHEME_NAMES:
        for backend in H.MoEBackend:
            layer = MinimalMoELayer()
            try:
                H.create_moe_weights(layer, name, 2, 32, 32, backend, emulation=True, device=device)
            except Exception as exc:
                raise AssertionError(f"{name} x {backend.name}: create_moe_weights raised {type(exc).__name__}: {exc}") from exc
            for attr in ("w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale"):
                assert hasattr(layer, attr), f"{name} x {backend.name}: create_moe_weights did not create {attr}"
            try:
                H.convert_layer_weights(layer, name, backend)
            except Exception as exc:
                raise AssertionError(f"{name} x {backend.name}: weight post-processing raised {type(exc).__name__}: {exc}") from exc
    return {}
