"""AMD Quark checkpoints (`export_safetensors`, its HF format, real_quantized),
OCP MX schemes.

Recognised config: quantization_config {"quant_method": "quark"} with a
global_quant_config whose weight is an OCP MX spec (qscheme per_group,
group_size 32, scale_format e8m0) and whose input_tensors is the same
element type, dynamic, with the harness scheme's scale mode ("even"), or
absent for MXFP8 (weight only). Per-layer overrides (layer_quant_config,
layer_type_quant_config) are refused: the harness has one scheme per layer.

Per expert projection: `weight` (fp4: uint8 [N, K/2], two codes per byte;
fp6: uint8 [N, 3K/4], four codes in three bytes (unpack_fp6); fp8: uint8 or float8 [N, K]) and `weight_scale` (uint8
E8M0 [N, K/32]).
"""
from __future__ import annotations

import torch

from harness.checkpoints.completeness import check_experts
from harness.checkpoints.errors import CheckpointFormatError, expect_object
from harness.checkpoints.files import expert_groups
from harness.checkpoints.stacking import collect, e8m0_scales, fetch, stacked
from harness.moe.schemes import get_scheme
from harness.moe import loaders
import harness.formats as hf

FORMAT = "quark"
BIAS_SUFFIXES: dict = {}  # per-expert biases: this format stores none (read_gptoss has them)
SHARED_EXPERT = True  # a dense shared MLP is stored like an expert's projections (load.read_shared)
# quark weight dtype -> (harness weight format, harness scheme, activation dtype or None)
_DTYPES = {"fp4": ("mxfp4", "w_mxfp4_a_mxfp4", "fp4"),
           "fp6_e2m3": ("mxfp6_e2m3", "w_mxfp6_e2m3_a_mxfp6_e2m3", "fp6_e2m3"),
           "fp6_e3m2": ("mxfp6_e3m2", "w_mxfp6_e3m2_a_mxfp6_e3m2", "fp6_e3m2"),
           "fp8_e4m3": ("mxfp8_e4m3", "w_mxfp8", None)}


def recognises(config: dict) -> bool:
    return (config.get("quantization_config") or {}).get("quant_method") == "quark"


def _fail(files, field, expected):
    raise CheckpointFormatError(files.folder / "config.json", f"quantization_config.{field}", expected)


def _check_mx(files, field, spec, dtype, dynamic):
    want = {"dtype": dtype, "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0", "is_dynamic": dynamic,
            "ch_axis": -1}
    if dynamic:
        want["scale_calculation_mode"] = get_scheme(_DTYPES[dtype][1]).scale_mode
    for k, v in want.items():
        if spec.get(k) != v:
            _fail(files, f"{field}.{k}", f"{v!r} (OCP MX as the harness scheme), got {spec.get(k)!r}")


def _weight_spec(files) -> dict:
    where = files.folder / "config.json"
    g = expect_object(where, "quantization_config.global_quant_config",
                      files.config["quantization_config"].get("global_quant_config"), optional=True)
    w = expect_object(where, "quantization_config.global_quant_config.weight", g.get("weight"), optional=True)
    dt = w.get("dtype")
    if not isinstance(dt, str) or dt not in _DTYPES:
        _fail(files, "global_quant_config.weight.dtype", f"one of {', '.join(_DTYPES)}, got {dt!r}")
    return w


def weight_format(files) -> str:
    return _DTYPES[_weight_spec(files)["dtype"]][0]


def scheme(files) -> str:
    qc = files.config["quantization_config"]
    where = files.folder / "config.json"
    w = _weight_spec(files)
    g = qc["global_quant_config"]
    _, hscheme, adt = _DTYPES[w["dtype"]]
    _check_mx(files, "global_quant_config.weight", w, w["dtype"], False)
    a = g.get("input_tensors")
    if a:
        a = expect_object(where, "quantization_config.global_quant_config.input_tensors", a)
    if adt is None:
        if a:
            _fail(files, "global_quant_config.input_tensors", f"none ({hscheme} is weight only), got {a.get('dtype')!r}")
    else:
        if not a:
            _fail(files, "global_quant_config.input_tensors", f"dynamic {adt} MX activations for {hscheme}")
        _check_mx(files, "global_quant_config.input_tensors", a, adt, True)
    for k in ("layer_quant_config", "layer_type_quant_config"):
        if qc.get(k):
            _fail(files, k, "empty (one scheme for every layer)")
    export = expect_object(where, "quantization_config.export", qc.get("export"), optional=True)
    if export.get("weight_format") != "real_quantized":
        _fail(files, "export.weight_format", "'real_quantized'")
    return hscheme


def groups(keys) -> dict:
    return expert_groups(keys)


def complete(files, blocks: dict, hscheme: str) -> None:
    check_experts(files.folder, files.config, blocks, parts(hscheme))


def parts(hscheme: str) -> tuple:
    """The tensors each expert projection stores (completeness.py)."""
    return ("weight", "weight_scale")


def block_tensors(files, block: str, experts: dict, hscheme: str) -> dict:
    wfmt = weight_format(files)

    def one(e, proj):
        s = fetch(files, block, experts, e, proj, "weight_scale", dtype=torch.uint8, check=e8m0_scales)
        if s.dim() != 2:
            name = experts[e][proj]["weight_scale"]
            raise CheckpointFormatError(files.file_of(name), name, f"a 2-D [N, K/32] E8M0 scale, got {tuple(s.shape)}")
        w = fetch(files, block, experts, e, proj, "weight")
        return {"weight": _unpack(files, experts[e][proj]["weight"], w, s, wfmt), "weight_scale": s}

    return stacked(collect(files, block, experts, one),
                   {"weight": ("w13_weight", "w2_weight"), "weight_scale": ("w13_weight_scale", "w2_weight_scale")})


def _unpack(files, name, w, s, wfmt):
    """Weight as the harness loader takes it: fp4 packed uint8 [N, K/2] (low
    nibble first), other formats one code per byte [N, K]."""
    el = hf.get_format(wfmt).element
    n, k = s.shape[0], s.shape[1] * hf.get_format(wfmt).block_size
    if el.width == 4:
        if w.dtype != torch.uint8 or tuple(w.shape) != (n, k // 2):
            raise CheckpointFormatError(files.file_of(name), name, f"uint8 [{n}, {k // 2}] packed fp4, got {w.dtype} {tuple(w.shape)}")
        return w
    if el.width == 8:
        if w.dtype not in (torch.uint8, getattr(torch, el.torch_dtype)) or tuple(w.shape) != (n, k):
            raise CheckpointFormatError(files.file_of(name), name, f"{el.torch_dtype} or uint8 [{n}, {k}], got {w.dtype} {tuple(w.shape)}")
        return w
    if w.dtype == torch.uint8 and tuple(w.shape) == (n, k * 3 // 4):
        return unpack_fp6(w)
    raise CheckpointFormatError(files.file_of(name), name, f"uint8 [{n}, {k * 3 // 4}] fp6 packed 4 codes in 3 bytes, "
                                f"got {w.dtype} {tuple(w.shape)}")


def unpack_fp6(w: torch.Tensor) -> torch.Tensor:
    """Quark's fp6 packing: codes v0..v3 (sign at bit 5) in bytes b0, b1, b2 as
    b0 = v0 | (v1 & 3) << 6, b1 = v1 >> 2 | (v2 & 15) << 4, b2 = v2 >> 4 | v3 << 2
    -> one code per byte [..., 4/3 * last]."""
    b = w.reshape(*w.shape[:-1], -1, 3).to(torch.int32)
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    v0 = b0 & 0x3F
    v1 = (b0 >> 6) | ((b1 & 0x0F) << 2)
    v2 = (b1 >> 4) | ((b2 & 0x03) << 4)
    v3 = b2 >> 2
    return torch.stack([v0, v1, v2, v3], dim=-1).reshape(*w.shape[:-1], -1).to(torch.uint8)


def quant_config(tensors: dict, hscheme: str):
    return loaders.load_ocp_mx(tensors, scheme=hscheme)
