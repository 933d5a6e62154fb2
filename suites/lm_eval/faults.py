"""Faults injected into the MoE emulation layer for the eval-gate tests.

All patch `harness.moe.quantize_input.moe_kernel_quantize_input`, which the
experts classes look up through the module at call time (docs/moe-api.md), so
every GEMM-input QDQ of every scheme goes through the wrapper.

- double_qdq_same_scale: upstream PR #42120 -> #46254 as literally described:
  each call QDQs twice with the same arguments.
- double_qdq_second_scale_missing: the double quantization as it ran in vLLM
  before #46254: the subclass QDQ'd with a1_gscale, then the base class QDQ'd
  again with `self.a1_scale`, which is None in emulation (the `a1_scale or
  a1_gscale` half of the fix); here the second nvfp4 pass runs with the
  silent default global scale 1.0.
- double_qdq_second_scale_dynamic: as above, the second nvfp4 pass with a
  dynamic per-tensor global scale (2688 / amax of the already-QDQ'd tensor).
- act_gscale_reciprocal: the decode/encode convention mix-up (checkpoint
  loaders): the activation global scale used as 1/gs.
- a2_qdq_skipped: the second GEMM's input is not quantized (a refactor that
  drops the a2 QDQ); relies on the experts' call order a1, a2 per forward.
"""

from __future__ import annotations

import contextlib

import torch

import harness.moe.quantize_input as qi


@contextlib.contextmanager
def _patched(wrapper_factory):
    orig = qi.moe_kernel_quantize_input
    qi.moe_kernel_quantize_input = wrapper_factory(orig)
    try:
        yield
    finally:
        qi.moe_kernel_quantize_input = orig


def _values(kw: dict) -> dict:
    """The first of two QDQs writes the values (no bf16_operand): the second
    quantizes them again, as the historical bug did."""
    return {k: v for k, v in kw.items() if k != "bf16_operand"}


def double_qdq_same_scale():
    def factory(orig):
        def twice(A, A_scale, quant_dtype, **kw):
            once, _ = orig(A, A_scale, quant_dtype, **_values(kw))
            return orig(once, A_scale, quant_dtype, **kw)
        return twice
    return _patched(factory)


def _second_scale(fn):
    def factory(orig):
        def twice(A, A_scale, quant_dtype, **kw):
            once, _ = orig(A, A_scale, quant_dtype, **_values(kw))
            second = fn(once, A_scale) if quant_dtype == "nvfp4" else A_scale
            return orig(once, second, quant_dtype, **kw)
        return twice
    return _patched(factory)


def double_qdq_second_scale_missing():
    return _second_scale(lambda once, s: torch.tensor(1.0, dtype=torch.float32, device=once.device))


def double_qdq_second_scale_dynamic():
    import harness.formats as hf

    return _second_scale(lambda once, s: hf.nvfp4_global_scale(once.float().abs().amax()))


def act_gscale_reciprocal():
    def factory(orig):
        def wrong(A, A_scale, quant_dtype, **kw):
            if quant_dtype == "nvfp4" and A_scale is not None:
                A_scale = 1.0 / A_scale
            return orig(A, A_scale, quant_dtype, **kw)
        return wrong
    return _patched(factory)


def a2_qdq_skipped():
    def factory(orig):
        calls = {"n": 0}

        def skip_second(A, A_scale, quant_dtype, **kw):
            calls["n"] += 1
            if calls["n"] % 2 == 0:  # a1, a2, a1, a2, ...: every second call is a2
                return A, None
            return orig(A, A_scale, quant_dtype, **kw)
        return skip_second
    return _patched(factory)


@contextlib.contextmanager
def no_fault():
    yield


FAULTS = {
    "none": no_fault,
    "double_qdq_same_scale": double_qdq_same_scale,
    "double_qdq_second_scale_missing": double_qdq_second_scale_missing,
    "double_qdq_second_scale_dynamic": double_qdq_second_scale_dynamic,
    "act_gscale_reciprocal": act_gscale_reciprocal,
    "a2_qdq_skipped": a2_qdq_skipped,
}


def changes_numerics(fault: str, scheme: str) -> bool:
    """Whether `fault` changes what `scheme` computes, i.e. a gate must catch it.
    double_qdq_same_scale is a bitwise no-op everywhere (test_double_quant.py);
    the scale faults act on the encode-side activation global scale (nvfp4);
    nothing acts on a weight-only scheme's activations."""
    from harness.moe.schemes import get_scheme

    s = get_scheme(scheme)
    if fault == "none" or fault == "double_qdq_same_scale" or s.act_fmt is None:
        return False
    if fault == "a2_qdq_skipped":
        return True
    return bool(s.needs_act_gscale)
