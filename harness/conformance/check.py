"""`conformance.check(fn, fmt, scale_mode, ...)`: one user function held to the
spec over the input families, for use inside a test (the pytest plugin's
fixture). Raises AssertionError naming the minimal failing block and the
verdict when a divergence is not explained by the registry."""
from __future__ import annotations

import inspect

import torch

import harness.formats as hf

from harness.conformance import divergences as dv
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
        raise AssertionError(failure_message(data))
    return data


def failure_message(data: dict) -> str:
    lines = ["conformance: unexplained divergence from the reference"]
    for i in data["implementations"]:
        if i.get("error"):
            lines.append(f"  {i['name']}: FAIL: {i['error']}")
    for c in data["cells"]:
        for stage, s in c["stages"].items():
            if s.get("status") == "error":
                lines.append(f"  {c['format']} {c['scale_mode']} {c['dtype']} {stage}: ERROR {s['error']}")
            for f in s.get("findings", []):
                if f.get("explained_by") or "error" in f:
                    continue
                nz = {i: v for i, v in enumerate(f["minimal"]) if v != 0}
                lines.append(f"  {c['format']} {c['scale_mode']} {c['rounding']} {c['dtype']} {stage}: "
                             f"{s['match_rate']:.2%} match; {f['verdict']}; minimal block "
                             f"({f['nonzero']} nonzero of {f['block_size']}): {nz}; impl {f['impl']} "
                             f"reference {f['reference']}")
    return "\n".join(lines[:40])
