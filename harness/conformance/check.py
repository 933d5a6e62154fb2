"""`conformance.check(fn, fmt, scale_mode, ...)`: one user function held to the
spec over the input families, for use inside a test (the pytest plugin's
fixture). Raises AssertionError with the verdict and the minimal failing block of
each divergence the registry does not explain (no arrays, no internal
frames)."""
from __future__ import annotations

import inspect

import torch

import harness.formats as hf

from harness.conformance import divergences as dv
from harness.conformance import report
from harness.conformance.protocol import Implementation
from harness.conformance.runner import run_conformance

_ALL_ARGS = ("x", "fmt", "scale_mode", "rounding", "global_scale")


def _wrap(fn, stage: str):
    """fn(x) or fn(x, fmt, scale_mode, rounding, global_scale) -> protocol call."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_one = len(params) == 1
    except (TypeError, ValueError):
        takes_one = False

    def call(x, fmt, mode, rounding, gs):
        return fn(x) if takes_one else fn(x, fmt, mode, rounding, gs)

    return call


def check(fn, fmt: str, scale_mode: str = "floor", rounding: str = "rne", stage: str = "qdq",
          dtypes=(torch.float32, torch.bfloat16, torch.float16), seed: int = 0, random_blocks: int = 64,
          name: str = "user", version: str = "0", registry=None, global_scale: str = "encode",
          isolate: bool = True, limits=None) -> dict:
    """Run `fn` as the `stage` ("qdq" or "quantize", returning (codes, scales))
    of an implementation over every input family; returns the run data.
    isolate=True runs it in a child process (a crash, exit or hang is a
    failure with its reason; `limits`: isolation.Limits); isolate=False keeps
    it in this process (faster; a crash or exit takes the test run with it)."""
    spec = hf.get_format(fmt)
    if stage not in ("qdq", "quantize"):
        raise ValueError(f"stage {stage!r}: check takes a qdq or a quantize function")
    kwargs = {"qdq": _wrap(fn, stage)} if stage == "qdq" else {"quantize": _wrap(fn, stage)}
    impl = Implementation(name=name, version=version, formats=(spec.name,),
                          scale_modes=(scale_mode,) if spec.is_mx else spec.scale_modes, roundings=(rounding,),
                          input_dtypes=tuple(dtypes), conventions={"global_scale": global_scale}, **kwargs)
    data = run_conformance([impl], formats=[spec.name], seed=seed, random_blocks=random_blocks,
                           registry=dv.default_registry() if registry is None else registry, isolate=isolate,
                           limits=limits)
    if data.get("interrupted"):
        raise KeyboardInterrupt(data["interrupted"])
    if data["failed"]:
        __tracebackhide__ = True  # pytest: the message is the finding, not this module's frames
        raise AssertionError(failure_message(data)) from None
    return data


MAX_LINES = 12


def failure_message(data: dict) -> str:
    """The verdict and the minimal block of each unexplained divergence, as
    summary.md writes them (conformance.report.finding_line): no arrays."""
    bad = list(report.unexplained(data))
    lines = [f"conformance: {len(bad)} unexplained divergence(s) from the reference"]
    for i in data["implementations"]:  # crashed, exited, timed out or changed its input (child process)
        if i.get("error"):
            lines.append(f"  {i['name']}: FAIL: {i['error']}")
    for c, stage, f in bad[:MAX_LINES]:
        lines.append("  " + (f"{c['implementation']} {c['format']} {c['scale_mode']} {c['dtype']} {stage}: ERROR "
                             f"{f['error_stage']}" if "error_stage" in f else report.plain(report.finding_line(c, stage, f))))
    if len(bad) > MAX_LINES:
        lines.append(f"  ... and {len(bad) - MAX_LINES} more (run_conformance's data has them all)")
    return "\n".join(lines)
