"""vLLM #44667: the fused dequant+GEMM kernel computed pointer offsets in
int32 and overflowed on a large model (Kimi-K2.6 NVFP4, TP=4). Generic check
(check_fused_large_offsets): rows routed to an expert whose weights start
beyond 2^31 bytes equal x @ dequant(W[e]).T. The weights sit in one large,
mostly untouched allocation (virtual memory: only the pages written are
committed), so this runs on the CPU (Triton interpreter) too.

The injected bug (every `tl.int64` of the kernel made `tl.int32`) wraps the
offset negative: the interpreter then reads far outside the allocation, which
usually kills the process (SIGSEGV) and otherwise returns wrong rows. It is
therefore run in a subprocess; detection = the check does not pass there."""
import os
import subprocess
import sys
import textwrap

import pytest

from suites.checks.offsets import check_fused_large_offsets


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_INJECT = textwrap.dedent('''
    import importlib.util, inspect, os, sys, tempfile, textwrap
    import torch
    torch.set_num_threads(1)
<<<<<<< HEAD
    from harness.kernels import fused_gemm as fused
    from suites.properties import moe_checks as mc
=======
    from harness.moe import fused
    from suites.checks.offsets import check_fused_large_offsets
>>>>>>> main
    src = textwrap.dedent(inspect.getsource(fused._moe_gemm_kernel))
    assert src.count("tl.int64") >= 3
    bug = ("from harness.kernels.fused_gemm import *\\nimport triton\\nimport triton.language as tl\\n"
           + src.replace("tl.int64", "tl.int32"))
    path = os.path.join(tempfile.mkdtemp(), "int32_offsets_kernel.py")
    open(path, "w").write(bug)
    spec = importlib.util.spec_from_file_location("int32_offsets_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if DEVICE == "cpu":
        from triton.runtime.interpreter import InterpretedFunction
        kern = InterpretedFunction(mod._moe_gemm_kernel)
    else:
        import triton
        kern = triton.jit(mod._moe_gemm_kernel)
    fused._kernel = lambda interpret: kern
    try:
        check_fused_large_offsets(DEVICE)
    except AssertionError as exc:
        print("DETECTED:", str(exc)[:200])
        sys.exit(3)
    print("NOT DETECTED")
    sys.exit(0)
''')


def test_fused_gemm_offsets_past_2_31_cpu():
    res = check_fused_large_offsets("cpu")
    assert res["max_offset"] > 2**31


@pytest.mark.gpu
def test_fused_gemm_offsets_past_2_31_gpu():
    assert check_fused_large_offsets("cuda")["max_offset"] > 2**31


def _run_injected(device):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = f"DEVICE = {device!r}\n" + _INJECT
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_injected_int32_offsets_are_detected_cpu():
    r = _run_injected("cpu")
    assert r.returncode != 0, f"int32 offsets went undetected:\n{r.stdout}\n{r.stderr[-2000:]}"
    assert "NOT DETECTED" not in r.stdout


@pytest.mark.gpu
def test_injected_int32_offsets_are_detected_gpu():
    r = _run_injected("cuda")
    assert r.returncode != 0, f"int32 offsets went undetected:\n{r.stdout}\n{r.stderr[-2000:]}"
