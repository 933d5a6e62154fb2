"""The scheme rows MoE implementations declare: the MoE scheme table
(harness.schemes) plus the rows only MoE conformance needs so far.

`w_mxfp4` is W4A16: MXFP4 weights (E8M0 block scales), activations not
quantized (triton_kernels' and gpt-oss' MoE). A row of the table with the
same name wins, so this one falls away once the table has it."""
from __future__ import annotations

from harness.moe.schemes import SCHEME_NAMES, SCHEMES, Scheme

LOCAL_SCHEMES = {s.name: s for s in (
    Scheme("w_mxfp4", "mxfp4", None, None, scale_mode="even"),
)}
ALL_SCHEME_NAMES = SCHEME_NAMES + tuple(n for n in LOCAL_SCHEMES if n not in SCHEMES)


def scheme_row(scheme) -> Scheme:
    if isinstance(scheme, Scheme):
        return scheme
    if scheme in SCHEMES:
        return SCHEMES[scheme]
    if scheme in LOCAL_SCHEMES:
        return LOCAL_SCHEMES[scheme]
    raise ValueError(f"unknown MoE scheme {scheme!r}; expected one of {', '.join(ALL_SCHEME_NAMES)}")
