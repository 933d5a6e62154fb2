"""Each producer's own dequantization of one expert projection, float32
[N, K], computed by the producer library's functions on the file's tensors
as stored. This is the other side of the round-trip proof; the harness side
reads the same files through its own loaders (roundtrip.py).

  compressed-tensors  unpack_fp4_from_uint8 + quantization.lifecycle dequantize
                      (x * fl(s / global_scale)); MX scales through decompress_mx_scale
  modelopt            NVFP4QTensor.dequantize (x * fl(s * weight_scale_2))
  quark               its export pack method's unpack + quark.torch.kernel.dequantize
  gpt-oss             transformers' convert_moe_packed_tensors (then transposed
                      back to [N, K] and the gate/up rows de-interleaved); its
                      gate_up_proj_bias split as GptOssExperts._apply_gate
                      splits gate_up + bias: gate [..., ::2], up [..., 1::2]
"""
from __future__ import annotations

import torch

F32 = torch.float32


def compressed_tensors(files, names: dict, config: dict) -> torch.Tensor:
    from compressed_tensors.compressors.mx_utils import decompress_mx_scale
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    (group,) = config["quantization_config"]["config_groups"].values()
    args = QuantizationArgs(**group["weights"])
    packed = files.get(names["weight_packed"])
    n, k2 = packed.shape
    codes = unpack_fp4_from_uint8(packed, n, 2 * k2, dtype=F32)
    scale = files.get(names["weight_scale"])
    if scale.dtype == torch.uint8:
        scale = decompress_mx_scale(scale)
    gs = files.get(names["weight_global_scale"]) if "weight_global_scale" in names else None
    return dequantize(x_q=codes, scale=scale.to(F32), args=args, global_scale=gs, dtype=F32)


def modelopt(files, names: dict, config: dict) -> torch.Tensor:
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    w = files.get(names["weight"])
    n, k2 = w.shape
    qt = NVFP4QTensor(torch.Size([n, 2 * k2]), F32, w)
    return qt.dequantize(dtype=F32, scale=files.get(names["weight_scale"]),
                         double_scale=files.get(names["weight_scale_2"]), block_sizes={-1: 16})


def quark(files, names: dict, config: dict) -> torch.Tensor:
    import quark.torch.kernel
    from quark.torch.utils import create_pack_method

    qc = config["quantization_config"]
    wcfg = qc["global_quant_config"]["weight"]
    scale = files.get(names["weight_scale"])
    pack = create_pack_method(qscheme=wcfg["qscheme"], dtype=wcfg["dtype"], mx_element_dtype=wcfg.get("mx_element_dtype"))
    reorder = qc.get("export", {}).get("pack_method", "reorder") == "reorder"
    x = pack.unpack(files.get(names["weight"]), reorder, origin_packed_axis_size=scale.shape[-1])
    s = 2 ** (scale.view(torch.uint8).to(torch.int16) - 127).to(F32)
    return quark.torch.kernel.dequantize(wcfg["dtype"], x.to(F32) if x.dtype != torch.uint8 else x, s, None,
                                         wcfg["ch_axis"], wcfg["group_size"], wcfg["qscheme"]).to(F32)


def gptoss(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[E, N, K] float32 in the file's row order (gate_up interleaved)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    return convert_moe_packed_tensors(blocks, scales, dtype=F32).transpose(1, 2)


def gptoss_gate_up_bias(bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate [E, I], up [E, I]) float32 of the file's interleaved gate_up_proj_bias
    [E, 2I], split the way transformers' GptOssExperts splits the biased gate_up
    output (models/gpt_oss/modeling_gpt_oss.py `_apply_gate`; inline there, so
    restated here)."""
    b = bias.to(F32)
    return b[..., ::2], b[..., 1::2]
