"""Names a config may use, importable without torch (config validation stays fast)."""
from harness.schemes import EXPERT_BACKENDS, SCHEME_NAMES  # noqa: F401  (EXPERT_BACKENDS: names a config may use)

SCHEMES = ("bf16",) + SCHEME_NAMES  # the baseline, then harness/schemes.py's rows
QUANTIZED_SCHEMES = SCHEMES[1:]
DTYPES = ("auto", "float32", "bfloat16", "float16")
