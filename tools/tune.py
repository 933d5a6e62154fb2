"""Measure launch configurations of the fused MoE GEMM on the GPU
(`python -m tools.tune`): decode/load variants, then tiles, on the
Mixtral GEMM1 shape at T=4096 (BLOCK_M 128) and T=16 (BLOCK_M 16). Prints
JSON; `best` is what launch_config.GPU_CONFIGS should hold. Mode
"predequant"'s rows are measured through launch_config.set_row, the
process-wide override, since moe_gemm's `config` reaches only its GEMM."""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys

import torch

from harness.commands.bench.moe import _time as _bench_time
from harness.kernels import fused_gemm as fused
from harness.kernels import launch_config as lc
from harness.kernels.fused_weights import FusedWeights

FLAGS = ("FAST_DECODE", "MULT_BCAST", "PACK_JOIN", "BYTE_DECODE", "BF16_DECODE")
TILES = {
    "large": [(128, 64, 8, 3), (128, 128, 8, 3), (256, 64, 8, 3), (128, 64, 4, 4), (256, 128, 8, 3)],
    "small": [(64, 128, 4, 3), (128, 128, 4, 3), (64, 256, 4, 3), (32, 256, 4, 4), (128, 64, 4, 4)],
}


def _ms(fn, iters=10, warmup=2):
    """Median CUDA-event milliseconds, the bench's own timer."""
    return _bench_time(fn, iters, warmup, torch.device("cuda"))


def dequant_exactness(dev) -> dict:
    import harness.moe as hm
    from harness.moe import ops

    g = torch.Generator(device=dev).manual_seed(3)
    w = torch.randn(2, 64, 256, generator=g, device=dev)
    w[0, 0, :64] = -1e-30  # negative zeros
    w[1, 1] *= 1e-38  # tiny blocks: element values near float32 denormals
    out = {}
    for s in ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp8"):
        q, gs = hm.quantize_expert_weights(w, s)
        fw = FusedWeights.from_quantized(q, gs)
        ref = ops.dequantize_expert_weights(q, gs, backend="torch").view(torch.int32)
        for fast in (False, True):
            d = fused.fused_dequantize(fw, {"FAST_DECODE": fast}).view(torch.int32)
            out[f"{s}.fast{int(fast)}"] = int((d != ref).sum())
    return out


def tune(dev, fast_decode_ok: bool = True) -> dict:
    import harness.moe as hm

    E, k, H, I = 8, 2, 4096, 14336
    g = torch.Generator(device=dev).manual_seed(0)
    w13 = (torch.randn(E, 2 * I, H, generator=g, device=dev) * H ** -0.5).to(torch.bfloat16)
    res, best = {}, {}
    fws = {}
    for s in ("w_mxfp4_a_mxfp4", "nvfp4"):
        q, gs = hm.quantize_expert_weights(w13, s)
        fws[s] = (FusedWeights.from_quantized(q, gs), gs)
        del q
    fw_bf16 = FusedWeights.from_float(w13)
    for cls, T in (("large", 4096), ("small", 16)):
        x = torch.randn(T * k, H, generator=g, device=dev).to(torch.bfloat16).float()
        ids = torch.randint(0, E, (T * k,), generator=g, device=dev)
        a_gs = torch.tensor(500.0, device=dev)
        base = lc.GPU_CONFIGS[cls].settings()
        fw = fws["w_mxfp4_a_mxfp4"][0]
        # cuBLAS bf16 reference of the same grouped GEMM (per expert, sorted rows)
        order = torch.argsort(ids)
        counts = torch.bincount(ids, minlength=E).tolist()
        xb = x.to(torch.bfloat16)[order]

        def cublas():
            o = 0
            for e in range(E):
                xb[o:o + counts[e]] @ w13[e].T
                o += counts[e]
        res[f"{cls}.cublas_bf16"] = _ms(cublas)
        res[f"{cls}.triton_bf16_weights"] = _ms(lambda: fused.moe_gemm(x, ids, fw_bf16, precision="bf16", config=base))
        flag_ms = {}
        for combo in itertools.product((False, True), repeat=len(FLAGS)):
            if combo[0] and not fast_decode_ok:
                continue
            if combo[3] and not (combo[0] and combo[2]):  # BYTE_DECODE acts only with FAST_DECODE and PACK_JOIN
                continue
            if combo[4] and not (combo[3] and combo[1]):  # BF16_DECODE acts only with BYTE_DECODE and MULT_BCAST
                continue
            cfg = dict(base, **dict(zip(FLAGS, combo)))
            try:
                flag_ms[combo] = _ms(lambda: fused.moe_gemm(x, ids, fw, precision="bf16", config=cfg))
            except Exception as exc:  # a variant that does not compile is skipped
                flag_ms[combo] = float("inf")
                res[f"{cls}.error.{combo}"] = str(exc)[:300]
            res[f"{cls}.mxfp4.flags.{'-'.join(f'{n}={int(v)}' for n, v in zip(FLAGS, combo))}"] = flag_ms[combo]
        bflags = dict(zip(FLAGS, min(flag_ms, key=flag_ms.get)))
        tile_ms = {}
        for bn, bk, nw, ns in TILES[cls]:
            cfg = dict(bflags, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
            try:
                tile_ms[(bn, bk, nw, ns)] = _ms(lambda: fused.moe_gemm(x, ids, fw, precision="bf16", config=cfg))
            except Exception as exc:
                tile_ms[(bn, bk, nw, ns)] = float("inf")
                res[f"{cls}.error.{(bn, bk, nw, ns)}"] = str(exc)[:300]
            res[f"{cls}.mxfp4.tile.{bn}x{bk}.w{nw}.s{ns}"] = tile_ms[(bn, bk, nw, ns)]
        bn, bk, nw, ns = min(tile_ms, key=tile_ms.get)
        best[cls] = dict(bflags, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
        res[f"{cls}.nvfp4.best"] = _ms(lambda: fused.moe_gemm(x, ids, fws["nvfp4"][0], precision="bf16",
                                                              a_gscale=a_gs, config=best[cls]))
        res[f"{cls}.mxfp4.best"] = min(tile_ms.values())
    fws = fw_bf16 = w13 = None  # free the GPU memory before empty_cache
    torch.cuda.empty_cache()
    return {"timings_ms": res, "best": best}


FLOAT_TILES = [(128, 64, 8, 3), (128, 128, 8, 3), (256, 64, 8, 3), (128, 64, 4, 4), (256, 128, 8, 4)]
DEQUANT_TILES = [(32, 256, 4, 2), (64, 128, 4, 3), (16, 512, 4, 2)]


def _set_tile(row: str, bn: int, bk: int, nw: int, ns: int) -> None:
    """GPU_CONFIGS[row] with this tile for the rest of the process (its flags kept)."""
    lc.set_row("GPU_CONFIGS", row, dataclasses.replace(lc.GPU_CONFIGS[row], BLOCK_N=bn, BLOCK_K=bk, num_warps=nw,
                                                       num_stages=ns))


def tune_predequant(dev) -> dict:
    """Tiles of mode "predequant" (dequant pass + grouped GEMM on bf16 weights),
    Mixtral GEMM1 at T=4096, MXFP4."""
    import harness.moe as hm

    E, k, H, I, T = 8, 2, 4096, 14336, 4096
    g = torch.Generator(device=dev).manual_seed(0)
    w13 = (torch.randn(E, 2 * I, H, generator=g, device=dev) * H ** -0.5).to(torch.bfloat16)
    q, _ = hm.quantize_expert_weights(w13, "w_mxfp4_a_mxfp4")
    fw = FusedWeights.from_quantized(q, None)
    del q
    x = torch.randn(T * k, H, generator=g, device=dev).to(torch.bfloat16).float()
    ids = torch.randint(0, E, (T * k,), generator=g, device=dev)
    res = {}
    dq = {}
    for bn, bk, nw, ns in DEQUANT_TILES:
        _set_tile("dequant", bn, bk, nw, ns)
        dq[(bn, bk, nw, ns)] = _ms(lambda: fused._dequantize(fw, torch.bfloat16))
        res[f"dequant.{bn}x{bk}.w{nw}.s{ns}"] = dq[(bn, bk, nw, ns)]
    _set_tile("dequant", *min(dq, key=dq.get))
    gm = {}
    for bn, bk, nw, ns in FLOAT_TILES:
        _set_tile("large_float", bn, bk, nw, ns)
        try:
            gm[(bn, bk, nw, ns)] = _ms(lambda: fused.moe_gemm(x, ids, fw, precision="bf16", mode="predequant"))
        except Exception as exc:
            gm[(bn, bk, nw, ns)] = float("inf")
            res[f"error.{(bn, bk, nw, ns)}"] = str(exc)[:300]
        res[f"predequant.{bn}x{bk}.w{nw}.s{ns}"] = gm[(bn, bk, nw, ns)]
    _set_tile("large_float", *min(gm, key=gm.get))
    res["fused.large"] = _ms(lambda: fused.moe_gemm(x, ids, fw, precision="bf16", mode="fused"))
    fw = w13 = None  # free the GPU memory before empty_cache
    torch.cuda.empty_cache()
    return {"timings_ms": res, "best": {"dequant": lc.GPU_CONFIGS["dequant"].settings(),
                                        "large_float": lc.GPU_CONFIGS["large_float"].settings()}}


if __name__ == "__main__":
    dev = torch.device("cuda")
    ex = dequant_exactness(dev)
    out = {"dequant_mismatches": ex}
    out.update(tune(dev, fast_decode_ok=not any(v for k, v in ex.items() if k.endswith("fast1"))))
    json.dump(out, sys.stdout, indent=1, default=str)
    sys.exit(0)
