"""The MoE schemes: the table lives in harness/schemes.py (torch-free)."""
from harness.schemes import BF16, NVFP4, SCHEME_NAMES, SCHEMES, Scheme, get_scheme

__all__ = ["BF16", "NVFP4", "SCHEME_NAMES", "SCHEMES", "Scheme", "get_scheme"]
