"""Names a config may use, importable without torch (config validation stays fast)."""

SCHEMES = (
    "bf16", "nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_mxfp6_e2m3",
    "w_mxfp4_a_fp8", "w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp8",
)
QUANTIZED_SCHEMES = SCHEMES[1:]
# harness.moe.experts.BACKENDS (a test keeps the two equal)
EXPERT_BACKENDS = ("unfused", "fused")
DTYPES = ("auto", "float32", "bfloat16", "float16")
