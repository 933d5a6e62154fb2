"""vLLM #40033: the E2M1 lookup table was moved to the device during forward;
`.to(device)` is not allowed during CUDA graph capture, so the fix moved it at
load time. Generic check (CPU proxy of capturability): a forward right after
conversion builds/moves no lookup table, reads no tensor value on the host
and copies nothing across devices (harness/testing/checks/host_work.no_host_work); on a GPU,
suites/properties/test_moe_gpu.py captures the forward in a CUDA graph."""
import pytest

import harness.moe.ops as ops

from harness.testing.checks import problem as pb
from harness.testing.checks.host_work import HostWorkInForward, check_no_host_work_in_forward, fresh_table_caches

from suites.regressions.inject import problem


@pytest.mark.parametrize("scheme", ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8"))
def test_tables_are_prepared_at_conversion(scheme, monkeypatch):
    fresh_table_caches(monkeypatch)
    p = problem(scheme)
    t, _, _, moe = pb.setup(p)
    check_no_host_work_in_forward(p, moe, t)


@pytest.mark.parametrize("scheme", ("nvfp4", "w_mxfp4_a_mxfp4", "w_mxfp8"))
def test_injected_table_move_in_forward_is_detected(scheme, monkeypatch):
    fresh_table_caches(monkeypatch)
    monkeypatch.setattr(ops, "prepare_device", lambda device: None)  # tables no longer moved at load time
    p = problem(scheme)
    t, _, _, moe = pb.setup(p)
    with pytest.raises(HostWorkInForward, match="table"):
        check_no_host_work_in_forward(p, moe, t)
