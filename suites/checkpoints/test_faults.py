"""Reading faults (scale convention, scale bytes, nibble order, w1/w3 halves,
per-expert global scale), each injected into the harness' reading of real
producer checkpoints; the round-trip proof must go red on every one."""
import pytest
import torch

import harness.formats as hf
from harness.checkpoints import read_gptoss, stacking
from harness.checkpoints.roundtrip import roundtrip

from suites.checkpoints.producer_checkpoints import made

NVFP4 = [("llmcompressor", "nvfp4"), ("modelopt", "nvfp4")]
FP4 = NVFP4 + [("llmcompressor", "mxfp4"), ("quark", "mxfp4"), ("gpt-oss", "mxfp4")]


def _red(producer, scheme):
    rt = roundtrip(made(producer, scheme))
    assert not rt.ok, f"fault not detected: {rt.summary()}"
    return rt


@pytest.mark.parametrize("producer,scheme", NVFP4)
def test_global_scale_multiplied_instead_of_divided(monkeypatch, producer, scheme):
    # each convention read as the other: ModelOpt's decode-side weight_scale_2 used as the
    # encode-side scale, compressed-tensors' encode-side global_scale inverted
    real_mo, real_ct = hf.global_scale_from_modelopt, hf.global_scale_from_compressed_tensors
    monkeypatch.setattr(hf, "global_scale_from_modelopt", lambda ws2: hf.check_global_scale(ws2))
    monkeypatch.setattr(hf, "global_scale_from_compressed_tensors", lambda gs: 1.0 / real_ct(gs))
    rt = _red(producer, scheme)
    assert all(r.differing for r in rt.results)
    del real_mo


@pytest.mark.parametrize("producer,scheme", NVFP4)
def test_scales_read_as_values_instead_of_bytes(monkeypatch, producer, scheme):
    real = hf.scale_bytes

    def by_value(scales, fmt, what="scales"):
        if isinstance(scales, torch.Tensor) and scales.dtype != torch.uint8:
            return scales.to(torch.float32).clamp(0, 255).to(torch.uint8)  # the value, not the bits
        return real(scales, fmt, what)

    monkeypatch.setattr(hf, "scale_bytes", by_value)
    _red(producer, scheme)


@pytest.mark.parametrize("producer,scheme", FP4)
def test_nibble_order_swapped(monkeypatch, producer, scheme):
    real = hf.unpack_fp4
    monkeypatch.setattr(hf, "unpack_fp4", lambda packed: real(((packed & 0x0F) << 4) | (packed >> 4)))
    _red(producer, scheme)


@pytest.mark.parametrize("producer,scheme", FP4 + [("quark", "mxfp6_e2m3")])
def test_w1_w3_halves_of_w13_swapped(monkeypatch, producer, scheme):
    def swapped(gate, up):
        return stacking.torch.stack([stacking.torch.cat([u, g], dim=0) for g, u in zip(gate, up)])

    monkeypatch.setattr(stacking, "cat_w13", swapped)  # what every per-expert reader stacks w13 with
    monkeypatch.setattr(read_gptoss, "deinterleave", lambda rows: torch.cat([rows[:, 1::2], rows[:, 0::2]], dim=1))
    rt = _red(producer, scheme)
    assert {r.name.rsplit(".", 1)[1] for r in rt.failures} == {"gate", "up"}


@pytest.mark.parametrize("producer,scheme", NVFP4)
def test_per_expert_global_scale_from_the_wrong_expert(monkeypatch, producer, scheme):
    real_pair, real_scalars = stacking.pair, stacking.scalars
    monkeypatch.setattr(stacking, "pair", lambda g, u: real_pair(g[1:] + g[:1], u[1:] + u[:1]))
    monkeypatch.setattr(stacking, "scalars", lambda v: real_scalars(v[1:] + v[:1]))
    _red(producer, scheme)
