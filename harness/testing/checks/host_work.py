"""Host work in forward (vLLM #40033 LUT moved to device during capture,
#46735 tensor truthiness): the CPU proxy of CUDA-graph capturability, and a
dynamo fullgraph trace with no graph break."""
from __future__ import annotations

import contextlib

import torch

from harness.formats import minifloat, scales

from harness.testing.checks.bitwise import assert_bitwise_equal
from harness.testing.checks.problem import run, setup


class HostWorkInForward(AssertionError):
    pass


_SYNC_METHODS = ("__bool__", "item", "tolist", "numpy", "__int__", "__float__", "__index__")
_DATA_DEPENDENT = ("nonzero", "masked_select", "unique", "unique_consecutive", "argwhere")


@contextlib.contextmanager
def no_host_work():
    """During the block: any host sync (Python truthiness / item / tolist of
    a tensor, data-dependent output shapes), any tensor built from host data
    (torch.tensor / as_tensor / from_numpy), any cross-device copy, and any
    decode table built or moved (a lookup-table cache miss in
    harness.formats) raises HostWorkInForward. On a GPU each of these is a
    host sync or a host->device copy, which CUDA graph capture forbids; on the
    CPU this is the detectable proxy."""
    saved = []

    def patch(owner, name, new):
        saved.append((owner, name, owner.__dict__.get(name, None) if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, new)

    def raiser(what):
        def f(*a, **k):
            raise HostWorkInForward(f"host work in forward: {what}")
        return f

    try:
        for m in _SYNC_METHODS:
            patch(torch.Tensor, m, raiser(f"Tensor.{m} (host sync)"))
        for m in _DATA_DEPENDENT:
            if hasattr(torch.Tensor, m):
                patch(torch.Tensor, m, raiser(f"Tensor.{m} (data-dependent shape: host sync)"))
            if hasattr(torch, m):
                patch(torch, m, raiser(f"torch.{m} (data-dependent shape: host sync)"))
        orig_as_tensor = torch.as_tensor
        patch(torch, "tensor", raiser("torch.tensor (tensor from host data)"))
        patch(torch, "from_numpy", raiser("torch.from_numpy (tensor from host data)"))

        def as_tensor(data, *a, **k):
            if not isinstance(data, torch.Tensor):
                raise HostWorkInForward("host work in forward: torch.as_tensor of host data")
            return orig_as_tensor(data, *a, **k)
        patch(torch, "as_tensor", as_tensor)
        orig_to = torch.Tensor.to

        def to(self, *a, **k):
            res = orig_to(self, *a, **k)
            if res.device != self.device:
                raise HostWorkInForward(f"host work in forward: Tensor.to copies {self.device} -> {res.device}")
            return res
        patch(torch.Tensor, "to", to)
        patch(torch.Tensor, "cuda", raiser("Tensor.cuda (host->device copy)"))
        patch(minifloat, "_cpu_lut", raiser("a decode table is built during forward (not prepared at conversion)"))
        patch(scales, "_e8m0_tables", raiser("E8M0 tables built during forward (not prepared at conversion)"))
        yield
    finally:
        for owner, name, old in reversed(saved):
            if old is None and isinstance(owner, type):
                delattr(owner, name)
            else:
                setattr(owner, name, old)


def fresh_table_caches(monkeypatch):
    """Empty the per-device decode-table caches of harness.formats, so a test
    sees whether conversion (not forward) fills them."""
    monkeypatch.setattr(minifloat, "_LUTS", {})
    monkeypatch.setattr(scales, "_DEVICE_TABLES", {})


def check_no_host_work_in_forward(problem, moe, t):
    """A forward performs no host sync, no host->device copy and builds no
    lookup table (the CPU proxy of CUDA-graph capturability)."""
    with torch.no_grad(), no_host_work():
        moe(t.hidden, t.router_logits)
    return {}

def check_dynamo_fullgraph(problem, t=None, moe=None):
    """torch.compile(fullgraph=True, backend="eager") traces the whole forward
    with no graph break (a graph break is where a tensor value is needed on
    the host: truthiness, item, data-dependent shapes) and equals eager bit
    for bit (backend "eager" runs the traced ops unchanged). The CPU proxy of
    the GPU torch.compile test; cheap because nothing is code-generated."""
    if t is None:
        t, _, _, moe = setup(problem)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(moe, fullgraph=True, backend="eager")
        with torch.no_grad():
            out = compiled(t.hidden, t.router_logits)
    except Exception as exc:
        raise AssertionError(f"torch.compile(fullgraph=True) failed: {type(exc).__name__}: {str(exc)[:400]}") from exc
    finally:
        torch._dynamo.reset()
    eager = run(moe, t)
    assert_bitwise_equal(out, eager, "dynamo-traced forward vs eager")
    return {}
