"""pytest plugin (entry point `pytest11`): fixtures for a kernel team's suite.

    def test_my_kernel(conformance):
        conformance.check(my_qdq, "mxfp4", "even")

    def test_my_property(format_strategies):
        @hypothesis.given(format_strategies.block_tensors("nvfp4"))
        def inner(case): ...

    def test_my_moe(moe_conformance):
        moe_conformance.check(my_moe)           # a harness.conformance.moe.MoEImplementation

`conformance` has check (harness.conformance.check.check), run (a whole
run_conformance) and Implementation; `moe_conformance` has check
(harness.conformance.moe.check_moe), run (run_moe_conformance) and
MoEImplementation; `format_strategies` is harness.strategies.
"""
from __future__ import annotations

import functools
import os
import types

import pytest


@pytest.fixture
def conformance():
    from harness.conformance import Implementation, run_conformance
    from harness.conformance.check import check

    return types.SimpleNamespace(check=check, run=run_conformance, Implementation=Implementation)


@pytest.fixture
def moe_conformance():
    from harness.conformance.moe import MoEImplementation, check_moe, run_moe_conformance

    # an implementation whose device or package is missing here skips the test, with the reason
    return types.SimpleNamespace(check=functools.partial(check_moe, on_skip=pytest.skip), run=run_moe_conformance,
                                 MoEImplementation=MoEImplementation)


@pytest.fixture
def format_strategies():
    import harness.strategies

    return harness.strategies


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    """buildkite-test-collector (a dependency of the pipelines extra, so present
    in projects that install this plugin) uploads on unconfigure and, without
    BUILDKITE_ANALYTICS_TOKEN, ends every downstream pytest run with a warning
    about the missing token. With no token and no JSON output asked for there
    is nothing to upload: its collector is dropped before it runs."""
    plugin = getattr(config, "_buildkite", None)
    if plugin is None or os.environ.get("BUILDKITE_ANALYTICS_TOKEN") or getattr(config.option, "jsonpath", None):
        return
    config.pluginmanager.unregister(plugin)
    del config._buildkite
