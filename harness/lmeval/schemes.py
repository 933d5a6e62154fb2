"""Names a config may use, importable without torch (config validation stays fast)."""
from harness.schemes import SCHEME_NAMES

SCHEMES = ("bf16",) + SCHEME_NAMES  # the baseline, then harness/schemes.py's rows
QUANTIZED_SCHEMES = SCHEMES[1:]
# harness.moe.experts.BACKENDS (a test keeps the two equal)
EXPERT_BACKENDS = ("unfused", "fused")
DTYPES = ("auto", "float32", "bfloat16", "float16")
