"""Checkpoint loaders: ModelOpt stores the DECODE-side weight_scale_2 =
amax/2688, compressed-tensors the ENCODE-side global_scale = 2688/amax; the
activation scale is one per layer input (max over the per-expert decode-side
input scales). Bugs: a reciprocal mix-up, or one scale over all experts where
each expert has its own. Generic check (check_checkpoint_conventions): the
same weights loaded in either convention dequantize to the truth (4u)."""
import pytest
import torch

import harness.formats as hf
import harness.moe.conversion as conv
import harness.moe.loaders as loaders

from harness.testing.checks.global_scale import check_checkpoint_conventions

from suites.regressions.inject import detects, problem


@pytest.mark.parametrize("seed", (0, 1, 2))
def test_both_conventions_load_the_truth(seed):
    check_checkpoint_conventions(problem("nvfp4", seed=seed, spread=6))


def test_injected_reciprocal_mixup_is_detected(monkeypatch):
    # ModelOpt's decode-side weight_scale_2 taken as if it were encode side.
    monkeypatch.setattr(hf, "global_scale_from_modelopt", lambda ws2: hf.check_global_scale(ws2))
    detects(check_checkpoint_conventions, problem("nvfp4"), match="modelopt")


def test_injected_compressed_tensors_inversion_is_detected(monkeypatch):
    # compressed-tensors' encode-side global_scale wrongly inverted.
    monkeypatch.setattr(hf, "global_scale_from_compressed_tensors", lambda gs: 1.0 / hf.check_global_scale(gs))
    detects(check_checkpoint_conventions, problem("nvfp4"), match="compressed_tensors")


def test_injected_one_scale_for_all_experts_is_detected(monkeypatch):
    orig = conv._per_expert

    def one_for_all(v, num_experts, what):
        return orig(v, num_experts, what).max().expand(num_experts).clone()

    monkeypatch.setattr(conv, "_per_expert", one_for_all)
    monkeypatch.setattr(loaders, "_per_expert", one_for_all)
    detects(check_checkpoint_conventions, problem("nvfp4", spread=2), match="differs from the truth")


def test_injected_input_scale_min_instead_of_max_is_detected(monkeypatch):
    # The activation global scale must cover the largest per-expert input scale.
    monkeypatch.setattr(conv, "_input_gscale", lambda s, what: None if s is None else
                        hf.global_scale_from_modelopt(s.to(torch.float32).min()).reshape(()))
    detects(check_checkpoint_conventions, problem("nvfp4", E=6), match="a1_gscale")
