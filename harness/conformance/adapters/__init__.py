"""Adapters for shipped implementations, each a zero-argument factory that
returns an Implementation or raises Unavailable(reason). They import the
installed package; no upstream code is copied. Declared as entry points in
pyproject.toml ([project.entry-points."moe_harness.implementations"])."""

# name -> "module:factory"; the same list as the pyproject entry points, so the
# shipped adapters resolve even where the package's metadata is stale.
SHIPPED = {
    "reference": "harness.conformance.adapters.reference:reference",
    "harness-triton": "harness.conformance.adapters.harness_triton:harness_triton",
    "torchao-mx": "harness.conformance.adapters.torchao:torchao_mx",
    "torchao-nvfp4": "harness.conformance.adapters.torchao:torchao_nvfp4",
    "compressed-tensors-nvfp4": "harness.conformance.adapters.compressed_tensors:compressed_tensors_nvfp4",
    "quark-mx": "harness.conformance.adapters.quark:quark_mx",
    "modelopt-nvfp4": "harness.conformance.adapters.modelopt:modelopt_nvfp4",
    "modelopt-nvfp4-fake": "harness.conformance.adapters.modelopt:modelopt_nvfp4_fake",
    "vllm-nvfp4-ref": "harness.conformance.adapters.vllm:vllm_nvfp4_ref",
    "vllm-nvfp4-dequant": "harness.conformance.adapters.vllm:vllm_nvfp4_dequant",
    "vllm-mxfp8-torch": "harness.conformance.adapters.vllm:vllm_mxfp8_torch",
    "vllm-reference-mxfp4": "harness.conformance.adapters.vllm:vllm_reference_mxfp4",
    "vllm-triton-nvfp4": "harness.conformance.adapters.vllm:vllm_triton_nvfp4",
    "vllm-triton-mxfp4": "harness.conformance.adapters.vllm:vllm_triton_mxfp4",
}
