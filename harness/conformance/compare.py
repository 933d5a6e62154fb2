"""One conformance cell: an implementation against the reference for one
format, scale mode, rounding, input dtype and global scale, stage by stage.

Stages: "scales" (block-scale bytes) and "codes" (element codes) from the
implementation's quantize; "dequantize" (the implementation's dequantize fed
the reference's codes and scales); "qdq" (its quantize-dequantize). Codes
inside blocks whose reference scale is NaN are not compared: the NaN scale
carries the block and the spec leaves the codes open; the two E4M3 NaN
codes (0x7F, 0xFF) count as the same NaN scale.

A block that mismatches is either explained by a registry entry
(divergences.yaml) or unexplained; the first block of each kind is shrunk to a
minimal block (shrink.py) and judged in exact arithmetic (verdict.py).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

import torch

import harness.formats as hf
from harness.formats.spec import E4M3

from harness.conformance import divergences as dv
from harness.conformance import verdict as vd
from harness.conformance.protocol import STAGES, Implementation
from harness.conformance.shrink import shrink_block

_INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


class StageError(Exception):
    """The implementation's output is malformed (wrong shape, dtype, ...)."""


class InputMutated(StageError):
    """The implementation changed a tensor it was handed (a finding of its own)."""


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.is_floating_point():
        return a.view(_INT_VIEW.get(a.dtype, torch.uint8)) == b.view(_INT_VIEW.get(b.dtype, torch.uint8))
    return a == b


def guarded_call(fn, what: str, device, *tensors, **kwargs):
    """fn(copy of each tensor on `device`, **kwargs). Each call gets its own
    copies (on the CPU `x.to("cpu")` would hand over the caller's tensor
    itself), and after the call each copy must still equal its original bit
    for bit: an implementation that writes into its input would otherwise
    corrupt what every later call and implementation is given."""
    copies = [t.to(device, copy=True) for t in tensors]
    out = fn(*copies, **kwargs)
    for i, (orig, c) in enumerate(zip(tensors, copies)):
        if tuple(c.shape) != tuple(orig.shape) or c.dtype != orig.dtype:
            raise InputMutated(f"{what} changed its input #{i} in place (now {c.dtype} {tuple(c.shape)})")
        changed = int((~_same_bits(c.detach().cpu(), orig.cpu())).sum())
        if changed:
            raise InputMutated(f"{what} changed its input #{i} in place: {changed} of {orig.numel()} elements differ "
                               "after the call")
    return out


@dataclass(frozen=True)
class Cell:
    fmt: str
    mode: str
    rounding: str
    dtype: torch.dtype
    gs: Optional[float]  # encode-side global scale (nvfp4), None for MX

    def label(self) -> str:
        gs = "" if self.gs is None else f" gs={self.gs:g}"
        return f"{self.fmt} {self.mode} {self.rounding} {str(self.dtype).replace('torch.', '')}{gs}"


# ---- calling the implementation (outputs checked, then moved to the CPU)

def _as_bytes(t, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise StageError(f"{what} is {type(t).__name__}, not a tensor")
    if t.dtype != torch.uint8:
        if t.element_size() != 1:
            raise StageError(f"{what} has dtype {t.dtype}; expected uint8 (or a 1-byte float8 view)")
        t = t.view(torch.uint8)
    return t.cpu()


def impl_quantize(impl: Implementation, x: torch.Tensor, cell: Cell, device="cpu"):
    spec = hf.get_format(cell.fmt)
    out = guarded_call(lambda xc: impl.quantize(xc, cell.fmt, cell.mode, cell.rounding, _impl_gs(impl, cell)),
                       "quantize", device, x)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise StageError("quantize must return (codes, scales)")
    codes, scales = _as_bytes(out[0], "codes"), _as_bytes(out[1], "scales")
    want = tuple(x.shape[:-1]) + (x.shape[-1] // spec.block_size,)
    if tuple(codes.shape) != tuple(x.shape):
        raise StageError(f"codes shape {tuple(codes.shape)} != input shape {tuple(x.shape)} (one code per byte)")
    if tuple(scales.shape) != want:
        raise StageError(f"scales shape {tuple(scales.shape)} != {want}")
    return codes, scales


def impl_dequantize(impl, codes, scales, cell: Cell, dtype, device):
    y = guarded_call(lambda c, s: impl.dequantize(c, s, cell.fmt, _impl_gs(impl, cell), dtype), "dequantize", device,
                     codes, scales)
    return _check_values(y, codes.shape, dtype, "dequantize")


def impl_qdq(impl, x, cell: Cell, device="cpu"):
    y = guarded_call(lambda xc: impl.qdq(xc, cell.fmt, cell.mode, cell.rounding, _impl_gs(impl, cell)), "qdq",
                     device, x)
    return _check_values(y, x.shape, x.dtype, "qdq")


def _check_values(y, shape, dtype, what):
    if not isinstance(y, torch.Tensor):
        raise StageError(f"{what} returned {type(y).__name__}, not a tensor")
    if tuple(y.shape) != tuple(shape):
        raise StageError(f"{what} returned shape {tuple(y.shape)}; expected {tuple(shape)}")
    if y.dtype != dtype:
        raise StageError(f"{what} returned dtype {y.dtype}; expected {dtype}")
    return y.cpu()


def _impl_gs(impl, cell):
    return None if cell.gs is None else impl.global_scale_for(cell.gs)


def dequant_dtype(impl, cell) -> torch.dtype:
    if cell.dtype in impl.output_dtypes:
        return cell.dtype
    return torch.float32 if torch.float32 in impl.output_dtypes else impl.output_dtypes[0]


# ---- per-stage arrays: [blocks, width] for both sides, plus equality

def _values_equal(a, b):
    return (a.view(_INT_VIEW[a.dtype]) == b.view(_INT_VIEW[b.dtype])) | (torch.isnan(a) & torch.isnan(b))


def _canonical_nan(spec, scales):
    """E4M3 block scales: both NaN codes (0x7F, 0xFF) read as 0x7F; the sign
    of a NaN scale means nothing. E8M0 has the one NaN byte."""
    if spec.is_mx:
        return scales
    return torch.where((scales & 0x7F) == E4M3.nan_code, E4M3.nan_code, scales).to(torch.uint8)


def _scale_is_nan(spec, scales):
    return scales == (0xFF if spec.is_mx else E4M3.nan_code)


def stage_arrays(impl, x: torch.Tensor, cell: Cell, stage: str, device, cache=None):
    """(impl [nb, w], ref [nb, w], equal [nb, w], compared [nb, w]); x on the CPU.
    `cache` (a dict per input) keeps the reference's and the implementation's
    quantize results between the stages of one cell."""
    cache = {} if cache is None else cache
    spec = hf.get_format(cell.fmt)
    B = spec.block_size
    if "ref" not in cache:
        cache["ref"] = hf.quantize(x, cell.fmt, cell.mode, cell.rounding, cell.gs)
    ref = cache["ref"]
    nb = x.numel() // B
    if stage in ("scales", "codes"):
        if "impl_q" not in cache:
            cache["impl_q"] = impl_quantize(impl, x, cell, device)
        codes, scales = cache["impl_q"]
        if stage == "scales":
            a, b = _canonical_nan(spec, scales.reshape(nb, 1)), _canonical_nan(spec, ref.scales.reshape(nb, 1))
            return a, b, a == b, torch.ones_like(a, dtype=torch.bool)
        a, b = codes.reshape(nb, B), ref.codes.reshape(nb, B)
        compared = ~_scale_is_nan(spec, ref.scales.reshape(nb, 1)).expand(nb, B)
        return a, b, a == b, compared
    if stage == "dequantize":
        dt = dequant_dtype(impl, cell)
        y = impl_dequantize(impl, ref.codes, ref.scales, cell, dt, device)
        r = hf.dequantize(ref, dt)
    else:
        y = impl_qdq(impl, x, cell, device)
        r = hf.dequantize(ref, x.dtype)
    a, b = y.reshape(nb, B), r.reshape(nb, B)
    return a, b, _values_equal(a, b), torch.ones_like(a, dtype=torch.bool)


def _floats(t: torch.Tensor) -> list:
    return [float(v) for v in t.to(torch.float64).flatten()] if t.is_floating_point() else [int(v) for v in t.flatten()]


# ---- one block on its own: classification, shrinking, verdict

def _block_case(xs, cell, stage, ref_scale, impl_out=None, ref_out=None) -> dv.BlockCase:
    return dv.BlockCase(xs=xs, fmt=cell.fmt, mode=cell.mode, rounding=cell.rounding, dtype=cell.dtype,
                        gs=cell.gs, stage=stage, ref_scale=int(ref_scale), impl_out=impl_out, ref_out=ref_out)


def _classify_block(impl, registry, xs, cell, stage, device):
    """None if the block alone matches; else (explaining entry id or "", arrays)."""
    x = torch.tensor(xs, dtype=torch.float64).to(cell.dtype).reshape(1, -1)
    a, b, eq, cmp = stage_arrays(impl, x, cell, stage, device)
    if bool((eq | ~cmp).all()):
        return None
    ref_scale = hf.quantize(x, cell.fmt, cell.mode, cell.rounding, cell.gs).scales.flatten()[0]
    entry = dv.explain(registry, impl.name, impl.version,
                       _block_case(xs, cell, stage, ref_scale, _floats(a[0]), _floats(b[0])))
    return (entry.id if entry else ""), (a, b)


def finding(impl, registry, xs, cell, stage, device, target: str, family: str, index: int) -> dict:
    """Shrink block `xs` keeping its classification `target` and judge it."""
    def fails(cand):
        try:
            got = _classify_block(impl, registry, cand, cell, stage, device)
        except Exception:
            return False  # a candidate that crashes the implementation is a different finding
        return got is not None and got[0] == target

    alone = fails(xs)
    minimal, calls = shrink_block(xs, fails) if alone else (list(xs), 0)
    out = {"explained_by": target or None, "family": family, "block_index": index, "reproduces_alone": alone,
           "original": xs, "minimal": minimal, "nonzero": sum(1 for v in minimal if v != 0),
           "block_size": len(minimal), "shrink_calls": calls}
    x = torch.tensor(minimal, dtype=torch.float64).to(cell.dtype).reshape(1, -1)
    a, b, eq, cmp = stage_arrays(impl, x, cell, stage, device)
    ref = hf.quantize(x, cell.fmt, cell.mode, cell.rounding, cell.gs)
    args = (stage, minimal, cell.fmt, cell.mode, cell.rounding, cell.gs,
            dequant_dtype(impl, cell) if stage == "dequantize" else cell.dtype)
    refs = {"ref_codes": ref.codes.flatten().tolist(), "ref_scales": ref.scales.flatten().tolist()}
    want = vd.expected(*args, **refs)
    impl_l, ref_l = _floats(a), _floats(b)
    out.update(vd.judge(stage, impl_l, ref_l, want))
    if not spec_is_mx(cell):
        # NVFP4's order of float32 steps is a convention; say also who is right
        # in real arithmetic, where the two differ.
        out["real_arithmetic_verdict"] = vd.judge(stage, impl_l, ref_l, vd.expected(*args, **refs, real=True))["verdict"]
    out.update({"impl": impl_l, "reference": ref_l, "spec": want, "exact": vd.explain(minimal, cell.fmt, cell.mode, cell.gs)})
    return out


def spec_is_mx(cell) -> bool:
    return hf.get_format(cell.fmt).is_mx


# ---- a whole cell

def run_cell(impl: Implementation, cell: Cell, x: torch.Tensor, labels: list, device, registry,
             seed: int = 0, max_findings: int = 4) -> dict:
    spec = hf.get_format(cell.fmt)
    B = spec.block_size
    xb_all = x.reshape(-1, B)
    sampled = False
    if x.numel() > impl.max_elements:
        keep = max(1, impl.max_elements // x.shape[1])
        rows = sorted(random.Random(f"{seed}:{cell.label()}").sample(range(x.shape[0]), keep))
        per_row = x.shape[1] // B
        labels = [labels[r * per_row + j] for r in rows for j in range(per_row)]
        x = x[rows]
        xb_all = x.reshape(-1, B)
        sampled = True
    out = {"implementation": impl.name, "version": impl.version, "format": cell.fmt, "scale_mode": cell.mode,
           "rounding": cell.rounding, "dtype": str(cell.dtype).replace("torch.", ""), "global_scale": cell.gs,
           "blocks": xb_all.shape[0], "sampled": sampled, "stages": {}}
    cache = {"ref": hf.quantize(x, cell.fmt, cell.mode, cell.rounding, cell.gs)}
    ref_scales = cache["ref"].scales.flatten()
    for stage in STAGES:
        if not impl.provides(stage):
            out["stages"][stage] = {"status": "not provided"}
            continue
        try:
            a, b, eq, cmp = stage_arrays(impl, x, cell, stage, device, cache)
        except InputMutated as e:  # its own finding: the implementation wrote into what it was given
            out["stages"][stage] = {"status": "error", "error": f"InputMutated: {e}", "input_mutated": True}
            continue
        except Exception as e:  # a crash is a failure of the cell, reported with its message
            out["stages"][stage] = {"status": "error", "error": f"{type(e).__name__}: {e}"}
            continue
        compared, matched = int(cmp.sum()), int((eq & cmp).sum())
        bad = torch.nonzero((~eq & cmp).any(-1)).flatten().tolist()
        st = {"status": "ok", "compared": compared, "matched": matched,
              "match_rate": matched / compared if compared else 1.0, "mismatched_blocks": len(bad),
              "explained": {}, "unexplained_blocks": 0, "unexplained_families": {}, "findings": []}
        firsts = {}
        for i in bad:
            xs = _floats(xb_all[i])
            case = _block_case(xs, cell, stage, ref_scales[i], _floats(a[i]), _floats(b[i]))
            entry = dv.explain(registry, impl.name, impl.version, case)
            key = entry.id if entry else ""
            if entry:
                st["explained"][key] = st["explained"].get(key, 0) + 1
            else:
                st["unexplained_blocks"] += 1
                st["unexplained_families"][labels[i]] = st["unexplained_families"].get(labels[i], 0) + 1
            firsts.setdefault(key, i)
        for key, i in list(firsts.items())[:max_findings]:
            try:
                st["findings"].append(finding(impl, registry, _floats(xb_all[i]), cell, stage, device, key,
                                              labels[i], i))
            except Exception as e:
                st["findings"].append({"explained_by": key or None, "block_index": i,
                                       "error": f"{type(e).__name__}: {e}"})
        out["stages"][stage] = st
    return out


def cell_failed(cell_result: dict) -> bool:
    """A cell fails on any unexplained mismatch or any stage error."""
    return any(s.get("status") == "error" or s.get("unexplained_blocks", 0) > 0
               for s in cell_result["stages"].values())
