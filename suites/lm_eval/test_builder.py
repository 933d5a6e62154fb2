"""The lm-eval adapter builds every scheme, the bf16 baseline included, with
harness.moe.build_emulated_moe; without harness.moe it fails, never
substituting another layer."""
import sys

import pytest

from harness.lmeval import builder
from harness.moe import SCHEMES, build_emulated_moe


def test_the_builder_is_harness_moe():
    fn = builder.emulation_builder()
    assert fn is build_emulated_moe
    assert builder.builder_source(fn) == "harness.moe.layer.build_emulated_moe"


def test_missing_harness_moe_is_an_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "harness.moe", None)
    with pytest.raises(ImportError, match="harness.moe"):
        builder.emulation_builder()


def test_activation_scales_follow_the_scheme_row():
    for name, row in SCHEMES.items():
        assert builder.needs_activation_scales(name) == row.needs_act_gscale
    assert builder.needs_activation_scales("bf16") is False
