"""AMD Quark's OCP MX fake quantization (quark.torch's hw_emulation
fake_quantize_mx): qdq only (it returns no codes or scales), modes floor,
ceil and even. quark.torch imports onnx at import time; where that is
missing the adapter is skipped with the import error as the reason."""
from __future__ import annotations


import harness.formats as hf

from harness.conformance.protocol import Implementation, Unavailable

# Quark's element dtype names, matched on (ebits, mbits) of the format row.
_QUARK_ELEMENT = {(2, 1): "fp4", (2, 3): "fp6_e2m3", (3, 2): "fp6_e3m2", (4, 3): "fp8_e4m3", (5, 2): "fp8_e5m2"}


def quark_mx() -> Implementation:
    try:
        import quark
        from quark.torch.kernel.hw_emulation import hw_emulation_interface as hw
    except ImportError as e:
        raise Unavailable(f"amd-quark's quark.torch does not import: {e}") from None
    # The MX rows Quark has an element type for (it claims exactly these).
    elem = {n: _QUARK_ELEMENT[(f.ebits, f.mbits)] for n, f in hf.FORMATS.items()
            if f.is_mx and not f.element.is_int and (f.ebits, f.mbits) in _QUARK_ELEMENT}

    def qdq(x, fmt, mode, rounding, gs):
        return hw.fake_quantize_mx(x, axis=-1, block_size=hf.FORMATS[fmt].block_size,
                                   scale_calculation_mode=mode, mx_element_dtype=elem[fmt])

    return Implementation(
        name="quark-mx", version=getattr(quark, "__version__", "unknown"), formats=tuple(elem),
        scale_modes=("floor", "ceil", "even"), roundings=("rne",), devices=("cpu", "cuda"),
        conventions={"global_scale": "none", "scale_dtype": "float32 (fake quantization)", "packing": "none"},
        qdq=qdq)
