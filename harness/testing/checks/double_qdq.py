"""Double quantization (vLLM #46254, #46142): exactly one activation QDQ per
GEMM input per forward, counted at the dispatcher seam
harness.moe.quantize_input.moe_kernel_quantize_input."""
from __future__ import annotations

import contextlib
import math

import harness.moe.quantize_input as qi
from harness.moe import reference as ref

from harness.testing.checks.problem import run, setup


@contextlib.contextmanager
def record_act_qdq(monkeypatch=None, replace=None):
    """Wrap harness.moe.quantize_input.moe_kernel_quantize_input; yields the
    list of calls (shape, quant_dtype, input tensor, output tensor). With
    `replace`, that function is called instead of the real one."""
    orig = qi.moe_kernel_quantize_input
    calls = []

    def wrapper(A, A_scale, quant_dtype, *args, **kw):
        res = (replace or orig)(A, A_scale, quant_dtype, *args, **kw)
        calls.append({"shape": tuple(A.shape), "quant_dtype": quant_dtype, "input": A, "output": res[0]})
        return res

    qi.moe_kernel_quantize_input = wrapper
    try:
        yield calls
    finally:
        qi.moe_kernel_quantize_input = orig


def check_single_quantization(problem, t=None, moe=None):
    """Exactly one activation QDQ per GEMM input per forward (a1 over [T, H],
    a2 over the [T*k, I] pairs; the shared MLP's a1 over [T, H] and a2 over
    [T, S] after them), none of them re-quantizing an earlier output; zero
    calls for weight-only schemes."""
    if t is None:
        t, _, _, moe = setup(problem)
    scheme = ref.resolve_scheme(problem.scheme)
    with record_act_qdq() as calls:
        run(moe, t)
    desc = [(c["shape"], c["quant_dtype"]) for c in calls]
    if scheme.act_fmt is None:
        assert not calls, f"weight-only scheme {scheme.name}: activation QDQ called {len(calls)}x: {desc}"
        return {"calls": 0}
    T, H, I, k = problem.T, problem.H, problem.I, problem.top_k
    want = [("a1", T, H), ("a2", T * k, I)]
    if problem.shared:
        want += [("shared a1", T, H), ("shared a2", T, problem.shared)]
    assert len(calls) == len(want), (f"{scheme.name}: expected {len(want)} activation QDQ calls "
                                     f"({', '.join(w[0] for w in want)}) per forward, got {len(calls)}: {desc}")
    for c, (what, rows, cols) in zip(calls, want):
        shape = c["shape"]
        assert shape[-1] == cols and math.prod(shape[:-1]) == rows, (
            f"{what} QDQ over {shape}, expected [{rows}, {cols}]")
    for c in calls:
        assert c["quant_dtype"] == scheme.quant_dtype, f"QDQ dispatched with {c['quant_dtype']!r}, scheme key {scheme.quant_dtype!r}"
    return {"calls": len(calls)}
