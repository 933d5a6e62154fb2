"""`moe_conformance.check(impl)`: one MoE implementation held to every
bug-class check inside a test (the pytest fixture). Raises AssertionError
naming each failing check, its cell, the minimal problem and the verdict."""
from __future__ import annotations

from harness.conformance.moe.runner import run_moe_conformance


def _unrunnable(reason: str):
    raise AssertionError(f"moe conformance: not run: {reason}")


def check_moe(impl, schemes=None, checks=None, device: str = "cpu", seed: int = 0, full: bool = False,
              on_skip=_unrunnable) -> dict:
    """Run `impl` (a MoEImplementation, a registered name or module:object);
    returns the run data when nothing fails. An implementation that cannot
    run here (its package or device missing) goes to on_skip(reason): an
    AssertionError by default, pytest.skip in the fixture."""
    data = run_moe_conformance([impl], device=device, seed=seed, schemes=schemes, checks=checks, full=full)
    if data["skipped"]:
        on_skip("; ".join(f"{s['name']}: {s['reason']}" for s in data["skipped"]))
    if data["failed"]:
        raise AssertionError(failure_message(data))
    return data


def failure_message(data: dict) -> str:
    lines = ["moe conformance: the implementation fails bug-class checks"]
    for r in data["results"]:
        if r["status"] not in ("fail", "error"):
            continue
        c = r["cell"]
        cell = f"{c['scheme']} {c['routing']} {c['activation']} {c['dtype']}"
        lines.append(f"  {r['implementation']} {r['check']} [{cell}] {r['status'].upper()}: {r['message']}")
        if r.get("minimal_problem"):
            lines.append(f"    minimal problem: {r['minimal_problem']}; verdict: "
                         f"{r.get('evidence', {}).get('verdict', '')}")
    return "\n".join(lines[:60])
