"""Hostile implementations, loaded by `--impl suites.conformance.hostile:NAME`:
each misbehaves in one way a user's kernel can (the harness must report it as
that implementation's FAIL with its reason, and keep every other verdict).

mutates_qdq    correct qdq that also writes its result into its input
exits_0        sys.exit(0) inside qdq          exits_7    sys.exit(7)
os_exit        os._exit(3)                     segfault   SIGSEGV to itself
hangs          sleeps 5 minutes                chatty     prints 8 MB, then a correct qdq
factory_raises a factory raising RuntimeError  returns_nothing  qdq returns None
correct        the reference itself
"""
import os
import signal
import sys
import time

import harness.formats as hf
from harness.conformance import Implementation

MX = ("mxfp4",)


def _qdq(x, fmt, mode, rounding, gs):
    return hf.qdq(x, fmt, mode, rounding, gs)


def _mutating(x, fmt, mode, rounding, gs):
    y = hf.qdq(x, fmt, mode, rounding, gs)
    x.copy_(y)
    return y.clone()


def _doing(act):
    def qdq(x, fmt, mode, rounding, gs):
        act()
        return hf.qdq(x, fmt, mode, rounding, gs)
    return qdq


def _sleep():
    if os.environ.get("HANG_READY"):  # tells an interruption test the hang has begun
        open(os.environ["HANG_READY"], "w").close()
    time.sleep(300)  # long past any limit a test sets; short enough that a leak ends by itself


def _chat():
    sys.stdout.write("x" * (8 << 20))
    sys.stdout.flush()


def _impl(name, qdq):
    return Implementation(name=name, version="1.0", formats=MX, scale_modes=("floor",), qdq=qdq)


correct = _impl("correct", _qdq)
mutates_qdq = _impl("mutates-qdq", _mutating)
exits_0 = _impl("exits-0", _doing(lambda: sys.exit(0)))
exits_7 = _impl("exits-7", _doing(lambda: sys.exit(7)))
os_exit = _impl("os-exit", _doing(lambda: os._exit(3)))
segfault = _impl("segfault", _doing(lambda: os.kill(os.getpid(), signal.SIGSEGV)))
hangs = _impl("hangs", _doing(_sleep))
chatty = _impl("chatty", _doing(_chat))
returns_nothing = _impl("returns-nothing", lambda x, fmt, mode, rounding, gs: None)


def _exit_5_qdq(x, fmt, mode, rounding, gs):
    os._exit(5)


def _segv_qdq(x, fmt, mode, rounding, gs):
    os.kill(os.getpid(), signal.SIGSEGV)


# module-level functions only: these pickle (what a spawned child is given)
picklable_exit = _impl("picklable-exit", _exit_5_qdq)
picklable_segv = _impl("picklable-segv", _segv_qdq)


def factory_raises():
    raise RuntimeError("this factory is broken")
