"""A whole MoE conformance run: resolve implementations (skipping, with the
reason, those whose package or device is missing), enumerate their cells,
run every check on every cell, shrink each failure to a minimal problem and
collect one result dict (report.py writes it).

Cells: each declared scheme with every declared routing, activation and
dtype, paired round-robin (scheme x max(#routings, #activations, #dtypes)
cells), or the whole product with full=True. Statuses: pass, fail (the
check's property does not hold: verdict, minimal problem), error (the
implementation raised where the check did not expect it), not provided (a
hook the check needs is missing), not applicable (the scheme has nothing
for the check to test)."""
from __future__ import annotations

import itertools
import math
import time
import traceback

import torch

from harness.moe.schemes import get_scheme


from harness.conformance.moe import checks as ck
from harness.conformance.moe import problems as pb
from harness.conformance.moe.protocol import MoEImplementation, Unavailable
from harness.conformance.moe.registry import get_moe_implementation
from harness.conformance.moe.shrink import shrink

STATUSES = ("pass", "fail", "error", "not provided", "not applicable")


def resolve(names) -> tuple:
    """(implementations, skipped [{name, reason}]). Unknown names raise ValueError."""
    impls, skipped = [], []
    for n in names:
        try:
            impls.append(get_moe_implementation(n))
        except Unavailable as e:
            skipped.append({"name": n if isinstance(n, str) else getattr(n, "name", repr(n)), "reason": str(e)})
    return impls, skipped


def cells_for(impl: MoEImplementation, schemes=None, full: bool = False) -> list:
    """[(scheme, routing, activation, dtype)] for the implementation."""
    out = []
    for s in impl.schemes:
        if schemes is not None and s not in schemes:
            continue
        if full:
            out += [(s, *c) for c in itertools.product(impl.routings, impl.activations, impl.dtypes)]
            continue
        n = max(len(impl.routings), len(impl.activations), len(impl.dtypes))
        out += [(s, impl.routings[i % len(impl.routings)], impl.activations[i % len(impl.activations)],
                 impl.dtypes[i % len(impl.dtypes)]) for i in range(n)]
    return out


def size_multiple(impl: MoEImplementation, scheme: str) -> int:
    """H and I are multiples of this: the implementation's and every block size."""
    k = get_scheme(scheme).k_multiple
    return impl.size_multiple * k // math.gcd(impl.size_multiple, k)


def base_problem(impl: MoEImplementation, cell, family: str, seed: int) -> pb.Problem:
    scheme, routing, activation, dtype = cell
    m = size_multiple(impl, scheme)
    size = -(-impl.base_size // m) * m
    E = min(8, impl.max_experts)
    return pb.make_problem(scheme, family, routing, activation, dtype, seed, E=E, top_k=min(2, E), H=size, I=size,
                           T=min(16, impl.max_tokens))


def _attempt(check: ck.Check, impl, problem, device) -> tuple:
    """(status, message, evidence or measurements) of one check on one problem."""
    try:
        inst = pb.materialize(problem, impl.conventions, device)
        res = check.run(ck.Ctx(impl, inst))
        return "pass", "", dict(res or {})
    except ck.CheckFailed as e:
        return "fail", str(e), e.evidence
    except Exception as e:  # the implementation raised where the check did not expect it
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        return "error", f"{type(e).__name__}: {e}", {"traceback": "".join(tb[-6:])[-3000:]}


def run_check(check: ck.Check, impl: MoEImplementation, cell, device, seed: int, shrink_budget: int) -> dict:
    scheme = get_scheme(cell[0])
    res = {"implementation": impl.name, "version": impl.version, "check": check.name,
           "bug_class": check.bug_class,
           "cell": dict(zip(("scheme", "routing", "activation", "dtype"), cell))}
    if check.hook and getattr(impl, check.hook) is None:
        return dict(res, status="not provided",
                    message=f"needs the hook {check.hook!r} (harness.conformance.moe.protocol); the implementation "
                            "does not provide it")
    why = check.applies(impl, scheme)
    if why:
        return dict(res, status="not applicable", message=why)
    t0 = time.perf_counter()
    measurements = {}
    for family in check.families:
        problem = base_problem(impl, cell, family, seed)
        status, message, info = _attempt(check, impl, problem, device)
        if status == "pass":
            measurements[family] = info
            continue
        out = dict(res, status=status, message=message, family=family, problem=repr(problem))
        if status == "fail":
            minimal, calls = problem, 0
            if check.shrinks:
                def fails(p):
                    return _attempt(check, impl, p, device)[0] == "fail"
                minimal, calls = shrink(problem, fails, size_multiple(impl, cell[0]), budget=shrink_budget)
                if minimal != problem:
                    status, message, info = _attempt(check, impl, minimal, device)
            out.update(message=message, minimal_problem=repr(minimal), minimal_size=dict(
                zip(("T", "E", "top_k", "H", "I"), minimal.size())), shrink_calls=calls)
        out.update(evidence=info, seconds=round(time.perf_counter() - t0, 3))
        return out
    return dict(res, status="pass", message="", measurements=measurements, seconds=round(time.perf_counter() - t0, 3))


def run_moe_conformance(names, device="cpu", seed: int = 0, schemes=None, checks=None, full: bool = False,
                        shrink_budget: int = 40, progress=None) -> dict:
    """Run every check on every cell of every implementation; the report data."""
    device = torch.device(device)
    selected = ck.CHECKS if checks is None else tuple(ck.get_check(c) for c in checks)
    if schemes is not None:
        for s in schemes:
            get_scheme(s)
    impls, skipped = resolve(names)
    results, info = [], []
    for impl in impls:
        if device.type not in impl.devices:
            skipped.append({"name": impl.name, "reason": f"does not run on {device.type} (devices: "
                                                         f"{list(impl.devices)})"})
            continue
        cells = cells_for(impl, schemes, full)
        if not cells:
            skipped.append({"name": impl.name, "reason": f"declares none of the schemes {list(schemes or [])}"})
            continue
        t0 = time.perf_counter()
        mine = []
        for check in selected:
            for cell in (cells[:1] if check.per_implementation else cells):
                r = run_check(check, impl, cell, device, seed, shrink_budget)
                mine.append(r)
                if progress:
                    progress(impl, r)
        results += mine
        info.append(dict(impl.describe(), cells=len(cells), seconds=round(time.perf_counter() - t0, 2),
                         failed=any(r["status"] in ("fail", "error") for r in mine)))
    return {"seed": seed, "device": str(device), "full": full, "checks": [c.name for c in selected],
            "implementations": info, "skipped": skipped, "results": results,
            "failed": any(r["status"] in ("fail", "error") for r in results)}
