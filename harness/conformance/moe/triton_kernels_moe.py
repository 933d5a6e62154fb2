"""triton_kernels' W4A16 MXFP4 MoE (the gpt-oss path of vLLM's TRITON
backend) as an MoE implementation under test, built by calling the installed
triton_kernels package's public functions:

    routing(router_logits, k, sm_first=not renormalize)  -> routing data, gather, scatter
    matmul_ogs(hidden, w13, gather_indx, fused SwiGLU (alpha 1.702, limit 7))
    matmul_ogs(., w2, scatter_indx, gammas = the routing weights)

Weights: MXFP4 codes packed two per byte (low nibble first) and E8M0 scale
bytes, w13 rows gate/up interleaved (what swiglu_fn reads: gate at even
columns); each is transposed so the contraction axis is dim 1, wrapped as
FP4 / uint8 triton_kernels tensors and converted to the device's default
MXFP4 value and scale layouts (Hopper / Blackwell swizzles), as vLLM's
_swizzle_mxfp4 does for this backend. On Hopper (sm_90), as vLLM does there,
the scale tensor's K is padded to a multiple of 4 and split-k is pinned to 1.

Where triton_kernels comes from: the folder named by MOE_HARNESS_TRITON_KERNELS
(it holds the `triton_kernels` package), else the copy vendored in the
installed vllm wheel (vllm/third_party). It runs only on a CUDA GPU; elsewhere
the factory raises Unavailable with the reason.

Declared precision: activations bfloat16 in and out, the first GEMM's
SwiGLU output stored as bfloat16 before the second GEMM (gemm_precision
"bfloat16": c_prec = 2 * 2^-8 in the derived tolerance).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from importlib import metadata
from pathlib import Path

import torch

from harness.moe.activations import SWIGLU_ALPHA, SWIGLU_LIMIT

from harness.conformance.moe.protocol import MoEImplementation, Unavailable

ENV = "MOE_HARNESS_TRITON_KERNELS"
SCHEME = "w_mxfp4"
CONVENTIONS = {"packing": "packed", "gate_up": "interleaved"}
# Scale tensors' K (blocks of 32) padded to this multiple on sm_90 (vLLM does
# the same before handing them to triton_kernels there).
HOPPER_SCALE_K_MULTIPLE = 4


def locate() -> tuple:
    """(folder holding the triton_kernels package, where it came from)."""
    env = os.environ.get(ENV)
    if env:
        root = Path(env)
        if not (root / "triton_kernels" / "__init__.py").is_file():
            raise Unavailable(f"{ENV}={env}: no triton_kernels package there (expected {root}/triton_kernels/)")
        return root, f"{ENV}={env}"
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable(f"triton_kernels not found: vllm is not installed and {ENV} is not set")
    root = Path(list(spec.submodule_search_locations)[0]) / "third_party"
    if not (root / "triton_kernels" / "__init__.py").is_file():
        raise Unavailable(f"triton_kernels not found: the installed vllm has no {root}/triton_kernels and {ENV} "
                          "is not set")
    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return root, f"vendored in vllm {version}"


def load(root: Path) -> types.SimpleNamespace:
    """The triton_kernels functions the adapter calls (its modules import each
    other as `triton_kernels.*`, so its folder goes on sys.path)."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        tk_routing = importlib.import_module("triton_kernels.routing")
        mo = importlib.import_module("triton_kernels.matmul_ogs")
        opt_flags = importlib.import_module("triton_kernels.matmul_ogs_details.opt_flags")
        tensor = importlib.import_module("triton_kernels.tensor")
        layout = importlib.import_module("triton_kernels.tensor_details.layout")
        numerics = importlib.import_module("triton_kernels.numerics")
        swiglu = importlib.import_module("triton_kernels.swiglu")
    except Exception as e:  # an ImportError, or a Triton too old / new for this copy
        raise Unavailable(f"triton_kernels from {root} does not import: {type(e).__name__}: {e}") from None
    return types.SimpleNamespace(
        routing=tk_routing.routing, matmul_ogs=mo.matmul_ogs, PrecisionConfig=mo.PrecisionConfig,
        FlexCtx=mo.FlexCtx, FnSpecs=mo.FnSpecs, FusedActivation=mo.FusedActivation,
        update_opt_flags_constraints=opt_flags.update_opt_flags_constraints, FP4=tensor.FP4,
        wrap_torch_tensor=tensor.wrap_torch_tensor, convert_layout=tensor.convert_layout,
        layout=layout, StridedLayout=layout.StridedLayout, value_layout=layout.make_default_matmul_mxfp4_w_layout,
        scale_layout=layout.make_default_matmul_mxfp4_w_scale_layout, InFlexData=numerics.InFlexData,
        swiglu_fn=swiglu.swiglu_fn, root=root)


def kernel_operands(tk, codes: torch.Tensor, scales: torch.Tensor, value_layout, scale_layout,
                    scale_k_multiple: int = 1) -> tuple:
    """vLLM-layout [E, N, K/2] packed codes and [E, N, K/32] E8M0 bytes ->
    (weight, scale) triton_kernels tensors with the contraction axis K on
    dim 1 (logical shapes [E, K, N] and [E, K/32 (padded), N]) in the given
    layouts: (layout class, kwargs) pairs."""
    if scale_k_multiple > 1:
        scales = torch.nn.functional.pad(scales, (0, -scales.shape[-1] % scale_k_multiple))
    w = tk.convert_layout(tk.wrap_torch_tensor(codes.transpose(-2, -1), dtype=tk.FP4), value_layout[0],
                          **value_layout[1])
    s = tk.convert_layout(tk.wrap_torch_tensor(scales.transpose(-2, -1)), scale_layout[0], **scale_layout[1])
    return w, s


def make_build(tk):
    def build(weights, config):
        dev = weights["w13_weight"].device
        hopper = torch.cuda.get_device_capability(dev) == (9, 0)
        if hopper:
            tk.update_opt_flags_constraints({"split_k": 1})
        vl = tk.value_layout(mx_axis=1)
        sl = tk.scale_layout(mx_axis=1, num_warps=8)
        kmul = HOPPER_SCALE_K_MULTIPLE if hopper else 1
        w13, s13 = kernel_operands(tk, weights["w13_weight"].data, weights["w13_weight_scale"].data, vl, sl, kmul)
        w2, s2 = kernel_operands(tk, weights["w2_weight"].data, weights["w2_weight_scale"].data, vl, sl, kmul)
        p13 = tk.PrecisionConfig(weight_scale=s13, flex_ctx=tk.FlexCtx(rhs_data=tk.InFlexData()))
        p2 = tk.PrecisionConfig(weight_scale=s2, flex_ctx=tk.FlexCtx(rhs_data=tk.InFlexData()))
        act = tk.FusedActivation(tk.FnSpecs("swiglu", tk.swiglu_fn, ("alpha", "limit")),
                                 (SWIGLU_ALPHA, SWIGLU_LIMIT), 2)
        k, sm_first = config.top_k, not config.renormalize

        def forward(hidden, router_logits):
            rdata, gather, scatter = tk.routing(router_logits, k, sm_first=sm_first)
            x = tk.matmul_ogs(hidden, w13, None, rdata, gather_indx=gather, precision_config=p13,
                              fused_activation=act)
            return tk.matmul_ogs(x, w2, None, rdata, scatter_indx=scatter, precision_config=p2,
                                 gammas=rdata.gate_scal)

        return forward

    return build


def triton_kernels_w4a16() -> MoEImplementation:
    root, origin = locate()
    if not torch.cuda.is_available():
        raise Unavailable(f"triton_kernels' matmul_ogs needs a CUDA GPU; none is available (found {origin})")
    tk = load(root)
    return MoEImplementation(
        name="triton-kernels-w4a16", version=origin, build=make_build(tk), schemes=(SCHEME,),
        routings=("softmax_renorm", "softmax"), activations=("swiglu_clamp",), devices=("cuda",),
        dtypes=("bfloat16",), conventions=CONVENTIONS, gemm_precision="bfloat16",
        size_multiple=128, base_size=256, max_tokens=16)
