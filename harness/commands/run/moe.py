"""MoE checks for `moe-harness run`: per scheme and expert backend, one seeded
problem of one MoE family (harness.moe.arch.FAMILIES, in turn), held to the
same library checks the property suites and the regressions use
(harness.testing.checks), so `run` and the suites share one definition of
"the layer is right":

  oracle   the layer's routing equals the float64 reference's, and its output
           lies within the derived tolerance (harness/moe/tolerance.py; the
           fused kernel's GEMM precision widens it by c_prec);
  qdq      exactly one activation QDQ per GEMM input, with the scheme's key;
  stages   every float32 stage of the layer within its own tolerance term.

err_vs_bound = max |out - ref| / tolerance (<= 1 passes); a failed check's
message says which element broke which bound.
"""
from __future__ import annotations

import torch

from harness.moe.arch import FAMILIES
from harness.moe.schemes import SCHEME_NAMES
from harness.schemes import EXPERT_BACKENDS
from harness.testing.checks.double_qdq import check_single_quantization
from harness.testing.checks.oracle import check_matches_reference, fused_c_prec
from harness.testing.checks.problem import family_problem, run, setup
from harness.testing.checks.stages import check_stages

BACKENDS = EXPERT_BACKENDS
FAMILY_ORDER = tuple(FAMILIES)


def problem_for(scheme: str, seed: int, index: int):
    """The run's problem for the index-th scheme: families in turn, seeded."""
    family = FAMILY_ORDER[index % len(FAMILY_ORDER)]
    return family, family_problem(family, scheme, seed=seed * 1009 + index)


def check_scheme(scheme: str, backend: str, seed: int, device, index: int = 0) -> dict:
    family, problem = problem_for(scheme, seed, index)
    name = f"moe.{scheme}.{backend}"
    details = {"family": family, "problem": repr(problem)}
    t, _, cfg, moe = setup(problem, backend, device)
    out = run(moe, t)
    c = fused_c_prec(moe, torch.device(device)) if backend == "fused" else 0.0
    details["c_prec"] = c
    try:
        oracle = check_matches_reference(problem, t, cfg, moe, out=out, c_prec=c)
        details["err_vs_bound"] = oracle["max_err_over_tol"]
        details["qdq_calls"] = check_single_quantization(problem, t, moe).get("calls")
        check_stages(problem, t, cfg, moe, c_prec=c)
    except AssertionError as e:
        return {"name": name, "passed": False, "message": str(e).splitlines()[0][:500], "details": details}
    return {"name": name, "passed": True, "details": details}


def iter_checks(seed: int, device, backends=BACKENDS):
    """The checks one by one, each yielded as soon as it finishes."""
    device = torch.device(device)
    for i, scheme in enumerate(SCHEME_NAMES):
        for backend in backends:
            try:
                yield check_scheme(scheme, backend, seed, device, index=i)
            except Exception as exc:  # a crash is a failed check with its reason, not a dead run
                yield {"name": f"moe.{scheme}.{backend}", "passed": False,
                       "details": {"error": f"{type(exc).__name__}: {exc}"}}


def run_checks(seed: int, device, backends=BACKENDS) -> list[dict]:
    return list(iter_checks(seed=seed, device=device, backends=backends))
