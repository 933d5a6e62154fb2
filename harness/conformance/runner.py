"""A whole conformance run: resolve implementations (skipping, with the
reason, those whose package or device is missing), enumerate every cell each
declares, run it, and collect one result dict."""
from __future__ import annotations

import time

import torch

import harness.formats as hf

from harness.conformance import divergences as dv
from harness.conformance import families
from harness.conformance.compare import Cell, cell_failed, run_cell
from harness.conformance.protocol import Implementation, Unavailable
from harness.conformance.registry import get_implementation

# NVFP4 encode-side global scales: powers of two, so a decode-side
# implementation's 1/gs is exact and the two conventions see the same numbers.
NVFP4_GLOBAL_SCALES = (1.0, 16.0)


def resolve(names) -> tuple[list, list]:
    """(implementations, skipped [{name, reason}]). Unknown names raise ValueError."""
    impls, skipped = [], []
    for n in names:
        if isinstance(n, Implementation):
            impls.append(n)
            continue
        try:
            impls.append(get_implementation(n))
        except Unavailable as e:
            skipped.append({"name": n, "reason": str(e)})
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
                    registry=None, dtypes=None, progress=None) -> dict:
    """Run every cell of every implementation; returns the report data."""
    if formats is not None:
        for f in formats:
            hf.get_format(f)
    device = torch.device(device)
    registry = dv.default_registry() if registry is None else registry
    impls, skipped = resolve(names)
    inputs = {}
    cells, impl_info = [], []
    for impl in impls:
        if device.type not in impl.devices:
            skipped.append({"name": impl.name, "reason": f"does not run on {device.type} (devices: {list(impl.devices)})"})
            continue
        t0 = time.perf_counter()
        n = 0
        for cell in cells_for(impl, formats, dtypes):
            key = (cell.fmt, cell.dtype, cell.gs or 1.0)
            if key not in inputs:
                inputs[key] = families.generate(cell.fmt, cell.dtype, seed=seed, random_blocks=random_blocks,
                                                gs=cell.gs or 1.0)
            fi = inputs[key]
            res = run_cell(impl, cell, fi.x, fi.labels, device, registry, seed=seed)
            res["failed"] = cell_failed(res)
            cells.append(res)
            n += 1
            if progress:
                progress(impl, cell, res)
        impl_info.append(dict(impl.describe(), cells=n, seconds=round(time.perf_counter() - t0, 2),
                              failed=any(c["failed"] for c in cells if c["implementation"] == impl.name)))
    return {"seed": seed, "device": str(device), "random_blocks": random_blocks,
            "implementations": impl_info, "skipped": skipped, "cells": cells,
            "registry": [{"id": e.id, "implementation": e.implementation, "versions": str(e.versions),
                          "stages": list(e.stages), "explanation": e.explanation} for e in registry],
            "failed": any(c["failed"] for c in cells)}
