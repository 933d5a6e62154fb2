"""vLLM #44667: the fused dequant+GEMM kernel computed pointer offsets in
int32 and overflowed on a large model (Kimi-K2.6 NVFP4, TP=4). Generic check
(check_fused_large_offsets): rows routed to an expert whose weights start
beyond 2^31 bytes equal x @ dequant(W[e]).T. The weights sit in one large,
mostly untouched allocation (virtual memory: only the pages written are
committed), so this runs on the CPU (Triton interpreter) too.

The injected bug (every `tl.int64` of the kernel source made `tl.int32`,
loaded beside the real sources by harness.kernels.loader.load_file) wraps the
offset negative: the interpreter then reads far outside the allocation, which
usually kills the process (SIGSEGV) and otherwise returns wrong rows. It is
therefore run in a subprocess; detection = the check does not pass there."""
import os
import subprocess
import sys
import textwrap

import pytest

from harness.testing.checks.offsets import check_fused_large_offsets


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_INJECT = textwrap.dedent('''
    import os, sys, tempfile
    import torch
    torch.set_num_threads(1)
    from harness.kernels import fused_gemm, loader
    from harness.testing.checks.offsets import check_fused_large_offsets
    src = (loader.SOURCE_DIR / "fused_gemm_src.py").read_text()
    assert src.count("tl.int64") >= 3
    path = os.path.join(tempfile.mkdtemp(), "int32_offsets_kernel.py")
    open(path, "w").write(src.replace("tl.int64", "tl.int32"))
    kern = loader.load_file(path, DEVICE == "cpu", "int32_offsets_kernel")._moe_gemm_kernel
    fused_gemm._kernel = lambda interpret: kern
    try:
        check_fused_large_offsets(DEVICE)
    except AssertionError as exc:
        print("DETECTED:", str(exc)[:200])
        sys.exit(3)
    except RuntimeError as exc:
        # A wrapped int32 offset points before the weights: where that memory
        # is unmapped, the GPU faults instead of reading wrong values (as on
        # an H200). The check failing loudly is a detection too.
        if "illegal memory access" not in str(exc):
            raise
        print("DETECTED (illegal address):", str(exc)[:200])
        sys.exit(4)
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


def _detected(r) -> bool:
    """The check failed (exit 3), the GPU faulted on the wrapped address
    inside it (exit 4), or the process died of a signal; any other exception
    (exit 1) is not a detection."""
    return r.returncode in (3, 4) or r.returncode < 0


def test_injected_int32_offsets_are_detected_cpu():
    r = _run_injected("cpu")
    assert _detected(r), f"int32 offsets went undetected (exit {r.returncode}):\n{r.stdout}\n{r.stderr[-2000:]}"
    assert "NOT DETECTED" not in r.stdout


@pytest.mark.gpu
def test_injected_int32_offsets_are_detected_gpu():
    r = _run_injected("cuda")
    assert _detected(r), f"int32 offsets went undetected (exit {r.returncode}):\n{r.stdout}\n{r.stderr[-2000:]}"
