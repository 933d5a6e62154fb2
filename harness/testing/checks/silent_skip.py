"""Silently skipped activation quantization (vLLM #52704: an unknown dtype
string fell through to no QDQ): the forward must differ from the same forward
with activation QDQ disabled, and the dispatcher must refuse unknown keys."""
from __future__ import annotations

import dataclasses

import torch

import harness.formats as hf
import harness.moe as hm
import harness.moe.quantize_input as qi
from harness.moe import reference as ref

from harness.testing.checks.double_qdq import record_act_qdq
from harness.testing.checks.problem import Extras, extras_of, output_tolerance, reference_trace, run, setup


def identity_qdq(A, A_scale, quant_dtype, *args, bf16_operand=False, **kw):
    """No quantization, in the form asked for: A, or with bf16_operand (the
    bf16 GEMM's operand) A in bf16, times A_scale for a two-level key."""
    if bf16_operand:
        if qi.quant_kind(quant_dtype) == "two_level":
            A = A.to(torch.float32) * A_scale.to(device=A.device, dtype=torch.float32).reshape(())
        return A.to(torch.bfloat16), None
    return A, None


def check_no_silent_skip(problem, t=None, moe=None, cfg=None):
    """For schemes that quantize activations, the forward differs from the same
    forward with activation QDQ disabled (the inputs are chosen so that QDQ is
    not the identity: the reference shows a difference beyond tolerance)."""
    if t is None:
        t, _, cfg, moe = setup(problem)
    scheme = ref.resolve_scheme(problem.scheme)
    if scheme.act_fmt is None or problem.T == 0:
        return {"skipped": True}
    out = run(moe, t)
    with record_act_qdq(replace=identity_qdq):
        out_noq = run(moe, t)
    # The reference must itself show that QDQ matters for these inputs.
    extras = extras_of(problem, t)
    trace = reference_trace(problem, t, cfg, extras)
    noq = Extras(extras.e_score_correction_bias, None if extras.shared_cfg is None else _NoActQdqConfig(extras.shared_cfg))
    trace_noq = reference_trace(problem, t, _NoActQdqConfig(cfg), noq)
    tol = output_tolerance(trace, problem, cfg, t.hidden.dtype)
    if not bool(((trace.out - trace_noq.out).abs() > 2 * tol).any()):
        return {"skipped": True}  # QDQ is (numerically) the identity here
    assert not torch.equal(out, out_noq), (
        f"{scheme.name}: output identical with activation QDQ disabled: activation quantization was skipped ({problem!r})")
    return {"skipped": False}


class _NoActQdqConfig:
    """A config view whose scheme quantizes no activations (reference only)."""

    def __init__(self, cfg):
        self._cfg = cfg
        self.scheme = dataclasses.replace(ref.resolve_scheme(cfg.scheme), act_fmt=None, quant_dtype=None)

    def __getattr__(self, name):
        return getattr(self._cfg, name)


def check_dispatcher_keys():
    """Every scheme's activation dispatch key quantizes (QDQ is not the
    identity on a generic tensor); an unknown key raises ValueError."""
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 3
    for name, scheme in hm.SCHEMES.items():
        if scheme.act_fmt is None:
            continue
        two_level = scheme.act_fmt in hf.FORMATS and hf.FORMATS[scheme.act_fmt].has_global_scale
        gs = hf.nvfp4_global_scale(x.abs().amax()) if two_level else None
        y, _ = qi.moe_kernel_quantize_input(x, gs, scheme.quant_dtype, scale_mode=scheme.scale_mode)
        assert not torch.equal(y, x), f"{name}: dispatch key {scheme.quant_dtype!r} left the activations unquantized"
        want = ref.qdq_activation(x, scheme, gscale=gs)
        assert torch.equal(y, want), f"{name}: dispatcher QDQ differs from the spec's reference QDQ"
        if qi.quant_kind(scheme.quant_dtype) in ("mx", "two_level"):  # written as the bf16 GEMM's operand
            y, _ = qi.moe_kernel_quantize_input(x, gs, scheme.quant_dtype, scale_mode=scheme.scale_mode,
                                                bf16_operand=True)
            op = (want * gs if two_level else want).to(torch.bfloat16)
            assert torch.equal(y.view(torch.int16), op.view(torch.int16)), (
                f"{name}: the dispatcher's bf16_operand is not the reference QDQ{' * global scale' * two_level}, "
                f"rounded once to bf16")
    for bad in ("mxfp6", "fp4", "nvfp8", "MXFP4", "int4"):
        try:
            qi.moe_kernel_quantize_input(x, None, bad)
        except ValueError:
            continue
        raise AssertionError(f"dispatcher accepted unknown quant dtype {bad!r} (must raise ValueError)")
    return {}
