"""A whole conformance run: resolve implementations (skipping, with the
reason, those whose package or device is missing; a factory or import that
fails is that implementation's FAIL), enumerate every cell each declares,
run them (each implementation in a child process of its own unless
`isolate=False`, isolation.py), and collect one result dict. An interrupted
run returns what finished, with "interrupted" set to the signal's name."""
from __future__ import annotations

import time

import torch

import harness.formats as hf

from harness.conformance import divergences as dv
from harness.conformance import families, isolation
from harness.conformance.compare import Cell
from harness.conformance.protocol import Implementation, Unavailable
from harness.conformance.registry import get_implementation
from harness.util import interrupt

# NVFP4 encode-side global scales: powers of two, so a decode-side
# implementation's 1/gs is exact and the two conventions see the same numbers.
NVFP4_GLOBAL_SCALES = (1.0, 16.0)


def resolve(names, broken=None) -> tuple[list, list]:
    """(implementations, skipped [{name, reason}]). Unknown names raise
    ValueError. A factory or module that raises anything else (or calls
    sys.exit) is appended to `broken` as {name, error} when a list is given,
    else raised."""
    impls, skipped = [], []
    for n in names:
        if isinstance(n, Implementation):
            impls.append(n)
            continue
        try:
            impls.append(get_implementation(n))
        except Unavailable as e:
            skipped.append({"name": n, "reason": str(e)})
        except (ValueError, TypeError):
            raise
        except (Exception, SystemExit) as e:
            if broken is None:
                raise
            what = f"called sys.exit({e.code!r})" if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}"
            broken.append({"name": n, "error": f"its factory or module failed: {' '.join(what.split())}"})
    return impls, skipped


def cells_for(impl: Implementation, formats=None, dtypes=None):
    for fmt in impl.formats:
        if formats is not None and fmt not in formats:
            continue
        spec = hf.FORMATS[fmt]
        modes = [m for m in impl.scale_modes if m in spec.scale_modes] if spec.is_mx else list(spec.scale_modes)
        gss = [None] if spec.is_mx else list(impl.global_scales or NVFP4_GLOBAL_SCALES)
        if not spec.is_mx and impl.conventions.get("global_scale") == "none":
            gss = [1.0]
        for mode in modes:
            for rounding in impl.roundings:
                for dtype in impl.input_dtypes:
                    if dtypes is not None and dtype not in dtypes:
                        continue
                    for gs in gss:
                        yield Cell(fmt, mode, rounding, dtype, gs)


def run_conformance(names, formats=None, device="cpu", seed: int = 0, random_blocks: int = 256,
                    registry=None, dtypes=None, progress=None, isolate: bool = True,
                    limits: isolation.Limits | None = None) -> dict:
    """Run every cell of every implementation; returns the report data.
    isolate: each implementation in a child process with `limits` (time per
    cell and per implementation, output); False runs them in this process."""
    if formats is not None:
        for f in formats:
            hf.get_format(f)
    device = torch.device(device)
    registry = dv.default_registry() if registry is None else registry
    broken: list = []
    impls, skipped = resolve(names, broken)
    inputs = {}
    cells, impl_info, interrupted = [], [], None
    for b in broken:
        impl_info.append({"name": b["name"], "version": "?", "cells": 0, "seconds": 0.0, "failed": True,
                          "error": b["error"]})
    for impl in impls:
        if device.type not in impl.devices:
            skipped.append({"name": impl.name, "reason": f"does not run on {device.type} (devices: {list(impl.devices)})"})
            continue
        t0 = time.perf_counter()
        try:
            jobs = []
            for cell in cells_for(impl, formats, dtypes):
                key = (cell.fmt, cell.dtype, cell.gs or 1.0)
                if key not in inputs:
                    inputs[key] = families.generate(cell.fmt, cell.dtype, seed=seed, random_blocks=random_blocks,
                                                    gs=cell.gs or 1.0)
                jobs.append((cell, inputs[key]))
        except KeyboardInterrupt as e:
            interrupted = e
            break
        if isolate:
            got = isolation.run_isolated(impl, jobs, device, registry, seed, limits, progress)
        else:
            got = isolation.run_in_process(impl, jobs, device, registry, seed, progress)
        cells.extend(got.cells)
        info = dict(impl.describe(), cells=len(got.cells), seconds=round(time.perf_counter() - t0, 2),
                    failed=got.error is not None or any(c["failed"] for c in got.cells))
        if got.isolation:
            info["isolation"] = got.isolation
        if got.error is not None:
            info["error"] = got.error
            info["output_tail"] = got.output_tail
        impl_info.append(info)
        if got.interrupted is not None:
            interrupted = got.interrupted
            break
    data = {"seed": seed, "device": str(device), "random_blocks": random_blocks,
            "implementations": impl_info, "skipped": skipped, "cells": cells,
            "registry": [{"id": e.id, "implementation": e.implementation, "versions": str(e.versions),
                          "stages": list(e.stages), "explanation": e.explanation} for e in registry],
            "failed": any(i["failed"] for i in impl_info)}
    if interrupted is not None:
        data["interrupted"] = interrupt.signal_name(interrupted)
        data["exit_code"] = interrupt.exit_code(interrupted)
        data["failed"] = True
    return data
