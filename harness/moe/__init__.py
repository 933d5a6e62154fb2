"""MoE emulation layer (docs/moe-api.md), shaped like vLLM's fused_moe
emulation path: routing -> experts (base class quantizes inputs) -> top-k sum.
Imports harness.formats and harness.kernels only."""
from harness.moe import quantize_input
from harness.moe.arch import FAMILIES, ROUTING_ROWS, MoEArch, make_arch
from harness.moe.activations import ACTIVATIONS, SWIGLU_ALPHA, SWIGLU_LIMIT, get_activation, silu_and_mul, swiglu_clamp
from harness.moe.config import CodesReleasedError, MoEQuantConfig
from harness.moe.conversion import (
    MoEBackend,
    convert_layer_weights,
    convert_to_nvfp4_moe_kernel_format,
    convert_to_ocp_mx_moe_kernel_format,
    create_moe_weights,
)
from harness.moe.experts import (
    ExpertsBase,
    Mxfp8WeightOnlyExperts,
    NvFp4EmulationExperts,
    OcpMxEmulationExperts,
    UnquantizedExperts,
    make_experts,
)
from harness.moe.layer import FusedMoE, build_emulated_moe, build_quant_config, calibrate_activation_scales, quantize_expert_weights
from harness.moe.loaders import load_compressed_tensors_nvfp4, load_modelopt_nvfp4, load_ocp_mx
from harness.moe.quantize_input import QUANT_DTYPES, moe_kernel_quantize_input
from harness.moe.routing import route, route_arch
from harness.moe.schemes import BF16, SCHEME_NAMES, SCHEMES, Scheme, get_scheme


def __getattr__(name):
    # harness.moe.reference (the independent oracle), its tolerance and the
    # Triton-backed modules load lazily: importing harness.moe never needs them.
    if name in ("reference", "tolerance", "checks", "bench"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
