"""The KL gates of the tiny configs under the CPU kernel set this process was
started with (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS are read by torch
and MKL at start-up, so each kernel set is its own process):

    ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 \\
        python -m suites.lm_eval.kernel_sets --schemes nvfp4,w_mxfp4_a_mxfp4 --faults all

For every scheme (correct layer, then each fault of suites/lm_eval/faults.py
that changes the scheme's numerics, `faults.changes_numerics`) it measures KL vs bf16 and KL vs the
certified oracle on the configs' 100 rolling documents and prints one JSON
line with both gates' verdicts against the scheme's config and the kernel set
torch actually used. Exit 0 iff every correct layer passes both gates and
every fault fails the oracle gate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m suites.lm_eval.kernel_sets")
    p.add_argument("--schemes", default="nvfp4,w_mxfp4_a_mxfp4")
    p.add_argument("--faults", default="", help="comma-separated names of suites/lm_eval/faults.py, or 'all'")
    p.add_argument("--expect-capability", default=None,
                   help="fail unless torch runs this CPU kernel set (DEFAULT, AVX2, AVX512): torch silently "
                        "falls back to a lower one the CPU supports")
    args = p.parse_args(argv)

    import torch

    from harness.lmeval.schemes import QUANTIZED_SCHEMES
    from harness.lmeval.config import load
    from harness.lmeval.configs import tiny_config_path
    from harness.lmeval.evaluate import _rolling_texts
    from harness.lmeval.kl import mean_token_kl
    from harness.util.offline import enter_offline, set_threads

    from suites.lm_eval import faults

    enter_offline(os.environ.get("HARNESS_CACHE_DIR"))
    set_threads(1)
    from harness.lmeval.adapter import MoEEmuLM

    names = [f for f in faults.FAULTS if f != "none"] if args.faults == "all" else \
        [f for f in args.faults.split(",") if f]
    schemes = [s for s in args.schemes.split(",") if s]
    unknown = [s for s in schemes if s not in QUANTIZED_SCHEMES] + [f for f in names if f not in faults.FAULTS]
    if unknown:
        p.error(f"unknown scheme or fault: {', '.join(unknown)}")
    lm = MoEEmuLM(scheme="bf16", dtype="float32", batch_size=64)
    capability = torch.backends.cpu.get_cpu_capability()
    if args.expect_capability and capability != args.expect_capability.upper():
        print(f"kernel_sets: torch runs the {capability} CPU kernels, not {args.expect_capability.upper()} "
              f"(ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')!r}): this agent lacks them", file=sys.stderr)
        return 2
    ok = True
    for scheme in schemes:
        cfg = load(tiny_config_path(scheme))
        texts = _rolling_texts(cfg, cfg.limit)
        oracle = "oracle:" + scheme
        for fault in ["none", *names]:
            if fault != "none" and not faults.changes_numerics(fault, scheme):
                continue
            with faults.FAULTS[fault]():
                kl = mean_token_kl(lm, texts, cfg.baseline_scheme, scheme, batch_docs=64, disable_tqdm=True)
                lm.set_scheme(oracle)
                lm.swapper.oracle_stats(oracle, reset=True)
                okl = mean_token_kl(lm, texts, oracle, scheme, batch_docs=64, disable_tqdm=True)
                cert = lm.swapper.oracle_stats(oracle, reset=True)
            kl_pass = kl["mean_kl"] <= cfg.kl.max
            oracle_pass = okl["mean_kl"] <= cfg.kl.oracle_max
            row = {"cpu_capability": capability, "mkl": os.environ.get("MKL_ENABLE_INSTRUCTIONS", "auto"),
                   "scheme": scheme, "fault": fault, "kl": kl["mean_kl"], "kl_max": cfg.kl.max,
                   "kl_pass": kl_pass, "oracle_kl": okl["mean_kl"], "oracle_max": cfg.kl.oracle_max,
                   "oracle_pass": oracle_pass, **cert}
            print(json.dumps(row), flush=True)
            if fault == "none":
                ok &= kl_pass and oracle_pass
            else:
                ok &= not oracle_pass
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
