"""The numerics spec (harness.formats): format descriptors, scale codecs,
fp4 packing and the torch reference quantize / dequantize. Imports nothing
else of the project."""
from harness.formats.global_scale import (
    check_global_scale,
    check_global_scale_kind,
    check_global_scale_values,
    global_scale_from_compressed_tensors,
    global_scale_from_modelopt,
    global_scale_to_modelopt,
    nvfp4_global_scale,
)
from harness.formats.minifloat import decode_lut, decode_value
from harness.formats.packing import pack_fp4, unpack_fp4
from harness.formats.quant import (
    FLOAT_DTYPES,
    QuantizedTensor,
    block_scale_values,
    dequantize,
    dequantize_without_value_checks,
    qdq,
    quantize,
)
from harness.formats.scales import e8m0_to_float, mx_scale_byte, mx_shared_exponent
from harness.formats.storage import code_bytes, code_dtypes, scale_bytes, scale_dtypes
from harness.formats.validate import (
    as_global_scale,
    check_code_range,
    check_codes,
    check_global_scale_shape,
    check_same_device,
    dequantize_inputs,
)
from harness.formats.spec import (
    E2M1,
    E2M3,
    E3M2,
    E4M3,
    E5M2,
    FORMAT_NAMES,
    FORMATS,
    MX_FORMAT_NAMES,
    NVFP4_GS_NUMERATOR,
    ROUNDINGS,
    SCALE_MODES,
    ElementSpec,
    FormatSpec,
    get_format,
)

__all__ = [n for n in dir() if not n.startswith("_")]
