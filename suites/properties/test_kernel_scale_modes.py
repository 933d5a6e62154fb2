"""Scale-mode codes are named constants shared by the reference and the
kernels (harness.formats.spec.SCALE_FLOOR ...), and a code the kernels do not
know is a compile-time error, never a silent fall into another mode's branch."""
from __future__ import annotations

import pytest
import torch

import harness.formats as hf
from harness.formats import spec
from harness.kernels import constants, launch
from harness.aot import emulation_launches as launch_aot
from harness.aot import compile as targets
from harness.kernels.loader import kernels

UNKNOWN = max(spec.SCALE_MODE_CODES.values()) + 1


def test_codes_are_the_named_constants():
    assert spec.SCALE_MODE_CODES == {"floor": spec.SCALE_FLOOR, "ceil": spec.SCALE_CEIL, "even": spec.SCALE_EVEN,
                                     "rceil": spec.SCALE_RCEIL}
    assert len(set(spec.SCALE_MODE_CODES.values())) == len(hf.SCALE_MODES)
    for mode, code in spec.SCALE_MODE_CODES.items():
        assert constants.kernel_constants("mxfp4", mode)["SCALE_MODE"] == code
    for interpret in (False, True):
        mod = kernels(interpret)
        assert [int(getattr(mod, f"SCALE_{m.upper()}").value) for m in hf.SCALE_MODES] == \
            [spec.SCALE_MODE_CODES[m] for m in hf.SCALE_MODES]


def test_unknown_code_fails_in_the_interpreter(monkeypatch):
    real = constants.kernel_constants

    def with_unknown_mode(fmt, scale_mode="floor", rounding="rne"):
        return dict(real(fmt, scale_mode, rounding), SCALE_MODE=UNKNOWN)

    monkeypatch.setattr(launch, "kernel_constants", with_unknown_mode)
    with pytest.raises(Exception, match="unknown SCALE_MODE code"):
        launch.qdq(torch.ones(1, 32), None, "mxfp4", "floor", "rne")


def _causes(exc):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def test_unknown_code_fails_to_compile():
    """Ahead of time, as `moe-harness targets` compiles (no GPU needed), on an
    MX launch (two-level rows never reach the scale-mode branch): the compile
    stops at the static assertion, whose message names the codes' home."""
    variant = next(v for v in launch_aot.qdq_variants() if v.constexprs["IS_MX"])
    triton, ASTSource, GPUTarget = targets._triton_api()
    target = targets.TARGETS["sm_90"]

    def compile_with(mode_code):
        src = ASTSource(kernels(False).qdq_kernel, variant.signature, dict(variant.constexprs, SCALE_MODE=mode_code),
                        targets._arg_attrs(target, variant.signature))
        return triton.compile(src, target=GPUTarget(target.backend, target.arch, target.warp_size),
                              options=dict(variant.options))

    assert compile_with(spec.SCALE_RCEIL) is not None  # the last known code compiles
    with pytest.raises(Exception) as info:
        compile_with(UNKNOWN)
    messages = [f"{type(e).__name__}: {e}" for e in _causes(info.value)]
    assert any("CompileTimeAssertionFailure" in m and "unknown SCALE_MODE code" in m for m in messages), messages
