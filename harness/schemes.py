"""The MoE quantization schemes as data: one row per scheme (importable
without torch: config validation and the pipeline generator read it).

Each row names the weight format, the activation format (None = weight-only),
the dispatch key of `moe_kernel_quantize_input` and the MX scale mode. Adding a
scheme is one row here; experts, loaders, build_emulated_moe and checks read
the row, never the name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class PerTensorFormat:
    """An activation format with ONE float32 scale per tensor (the decode-side
    scale, x ~= q * scale; dynamic amax / max_normal when none is given) and no
    block scales: not a row of harness.formats, whose rows are block formats."""
    name: str
    element: str  # the harness.formats element codec (attribute name: E4M3)


# Activation formats outside the block-format table, by the name a scheme's
# act_fmt / quant_dtype gives them.
PER_TENSOR_FORMATS: dict[str, PerTensorFormat] = {
    "fp8": PerTensorFormat("fp8", "E4M3"),  # vLLM's per-tensor float8_e4m3fn activations
}


@dataclass(frozen=True)
class Scheme:
    name: str
    weight_fmt: Optional[str]  # harness.formats name; None = unquantized ("bf16")
    act_fmt: Optional[str]  # GEMM inputs: a harness.formats row, a PER_TENSOR_FORMATS row, or None = no QDQ
    quant_dtype: Optional[str]  # dispatch key of moe_kernel_quantize_input
    # MX block-scale mode used for weights (at build) and activations (QDQ).
    # "even" as vLLM's OCP MX emulation (AMD Quark); two-level formats have no
    # mode ("floor" placeholder).
    scale_mode: str = "even"
    needs_act_gscale: bool = False  # two-level activations: a1_gscale/a2_gscale are required

    @property
    def weight_spec(self):
        import harness.formats as hf

        return hf.FORMATS[self.weight_fmt] if self.weight_fmt else None

    @property
    def two_level(self) -> bool:
        """Weights in a two-level format (global scale + minifloat block
        scale, NVFP4-style): per-expert encode-side global scales."""
        spec = self.weight_spec
        return spec is not None and spec.has_global_scale

    @property
    def weight_only(self) -> bool:
        return self.weight_fmt is not None and self.act_fmt is None

    @property
    def act_per_tensor(self) -> bool:
        """Activations quantized with one scale per tensor (a PER_TENSOR_FORMATS row)."""
        return self.act_fmt in PER_TENSOR_FORMATS

    @property
    def act_block_fmt(self) -> Optional[str]:
        """The activations' block format (a harness.formats row), or None."""
        return None if self.act_fmt is None or self.act_per_tensor else self.act_fmt

    @property
    def k_multiple(self) -> int:
        """H and I must be multiples of this (every block format used)."""
        import harness.formats as hf

        sizes = [1]
        for f in (self.weight_fmt, self.act_fmt):
            if f in hf.FORMATS:
                sizes.append(hf.FORMATS[f].block_size)
        return max(sizes)


def _mx(name, w, a, qd):
    return Scheme(name, w, a, qd, scale_mode="even")


# The two-level scheme the ModelOpt / compressed-tensors NVFP4 loaders default to.
NVFP4 = Scheme("nvfp4", "nvfp4", "nvfp4", "nvfp4", scale_mode="floor", needs_act_gscale=True)

_ROWS = (
    NVFP4,
    _mx("w_mxfp4_a_mxfp4", "mxfp4", "mxfp4", "mxfp4"),
    _mx("w_mxfp4_a_mxfp6_e3m2", "mxfp4", "mxfp6_e3m2", "mxfp6_e3m2"),
    _mx("w_mxfp4_a_mxfp6_e2m3", "mxfp4", "mxfp6_e2m3", "mxfp6_e2m3"),
    _mx("w_mxfp4_a_fp8", "mxfp4", "fp8", "fp8"),
    _mx("w_mxfp6_e3m2_a_mxfp6_e3m2", "mxfp6_e3m2", "mxfp6_e3m2", "mxfp6_e3m2"),
    _mx("w_mxfp6_e2m3_a_mxfp6_e2m3", "mxfp6_e2m3", "mxfp6_e2m3", "mxfp6_e2m3"),
    _mx("w_mxfp8", "mxfp8_e4m3", None, None),
    _mx("w_mxfp4", "mxfp4", None, None),  # W4A16, what gpt-oss runs: MXFP4 weights, bf16 activations
)

SCHEMES: dict[str, Scheme] = {row.name: row for row in _ROWS}
SCHEME_NAMES: tuple[str, ...] = tuple(SCHEMES)
# The experts' implementations every scheme runs on (harness.moe.experts):
# torch GEMMs over dequantized weights, or the fused Triton dequant + GEMM.
EXPERT_BACKENDS: tuple[str, ...] = ("unfused", "fused")
# The unquantized baseline accepted by build_emulated_moe (not a quant scheme).
BF16 = Scheme("bf16", None, None, None, scale_mode="floor")


def get_scheme(scheme) -> Scheme:
    if isinstance(scheme, Scheme):
        return scheme
    if scheme == "bf16":
        return BF16
    try:
        return SCHEMES[scheme]
    except (KeyError, TypeError):
        raise ValueError(f"unknown MoE scheme {scheme!r}; expected one of {', '.join(SCHEME_NAMES)} or 'bf16'") from None
