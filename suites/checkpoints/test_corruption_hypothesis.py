"""Hypothesis corrupts the real producer checkpoints (truncation, header
garbage, dtype, shape, a tensor in two shards, NaN / negative / zero / Inf
scales, missing experts, config variants) and `moe-harness checkpoint check`
must answer with one line and exit 2, or load the folder so that the
harness' weights are the producer's own dequantization of those files, read
by safetensors itself (bit for bit; ModelOpt within its documented bound).
Never a traceback, never a pass of something the harness could not have
read right. Corruptions that can only be refused (truncation, two copies,
a bad scale, a missing expert, a layer count the tensors do not match) must
be refused. Examples: half the profile's count (dev 20, ci 30, nightly 1000).
The cases are the checkpoints of the bundled tiny MoE (3 MoE layers, 8
experts, per-expert corruptions drawn over them); the tiny family models'
checkpoints have their refusals in test_family_checkpoints.py."""
import contextlib
import io
import json
import math
import shutil
import struct
import tempfile
from pathlib import Path

import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from harness import cli
from harness.checkpoints import producers
from harness.checkpoints.roundtrip import roundtrip

from suites.checkpoints.producer_checkpoints import CASES as ALL_CASES, made

CASES = [c for c in ALL_CASES if producers.get(c[0]).model is None]

ST = "model.safetensors"
EXAMPLES = max(10, settings.default.max_examples // 2)
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
BLOCK_SCALE_DTYPES = (torch.float8_e4m3fn, torch.uint8)
_source: dict = {}


def source(case):
    """(folder, tensors, config) of a cached producer checkpoint, read once."""
    if case not in _source:
        folder = made(*case)
        _source[case] = (folder, load_file(str(folder / ST)), json.loads((folder / "config.json").read_text()))
    return _source[case]


class SafetensorsFiles:
    """The producer side of the oracle: the folder's single file read by
    safetensors' own load_file (not the harness' CheckpointFiles)."""

    def __init__(self, folder):
        self.tensors = load_file(str(folder / ST))
        self.config = json.loads((folder / "config.json").read_text())

    def keys(self):
        return self.tensors.keys()

    def get(self, name):
        return self.tensors[name]


def write(dst: Path, src: Path, tensors=None, config=None, raw=None):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("made.json", "manifest.json", ".readers", "make.log"))
    if tensors is not None:
        save_file(tensors, str(dst / ST))
    if raw is not None:
        (dst / ST).write_bytes(raw)
    if config is not None:
        (dst / "config.json").write_text(json.dumps(config))


def check(folder) -> tuple:
    """(exit status, stderr) of `moe-harness checkpoint check FOLDER` in this process;
    an exception escaping it fails the example (a traceback)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(["checkpoint", "check", str(folder)])
    return rc, err.getvalue()


def one_line_refusal(rc, err):
    lines = [ln for ln in err.splitlines() if ln.startswith("moe-harness checkpoint check:")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    return lines[0]


def refused_or_exact(folder, rc, err):
    if rc == 2:
        return one_line_refusal(rc, err)
    assert rc == 0, (rc, err)
    rt = roundtrip(folder, producer_files=SafetensorsFiles(folder))
    assert rt.ok and len(rt.results) == 3 * 8 * 3, rt.summary()
    if rt.bound_ulp is None:
        assert all(r.differing == 0 for r in rt.results), rt.summary()
    return None


# ---- corruptions that can only be refused


def _experts(names, layer, e):
    return [k for k in names if f"layers.{layer}.mlp.experts.{e}." in k]


def _bad_scale(t: torch.Tensor, data) -> torch.Tensor:
    v = t.clone()
    flat = v.view(-1) if v.dtype != torch.float8_e4m3fn else v.view(torch.uint8).view(-1)
    i = data.draw(st.integers(0, flat.numel() - 1), label="element")
    if t.dtype == torch.float8_e4m3fn:
        flat[i] = data.draw(st.sampled_from([0x7F, 0xFF, 0x80 | int(flat[i]) | 1]), label="e4m3 byte")
    elif t.dtype == torch.uint8:
        flat[i] = 0xFF
    else:
        flat[i] = data.draw(st.sampled_from([0.0, -1.0, -0.0, math.inf, -math.inf, math.nan]), label="value")
    return v


@SETTINGS
@given(data=st.data())
def test_corruptions_that_must_be_refused(data):
    case = data.draw(st.sampled_from(CASES), label="case")
    src, tensors, config = source(case)
    kind = data.draw(st.sampled_from(["truncate", "two shards", "bad scale", "missing expert", "missing part",
                                      "layer count", "expert count"]), label="kind")
    names = sorted(tensors)
    experts = [k for k in names if ".experts." in k]
    t, cfg, raw, extra = dict(tensors), None, None, None
    if kind == "truncate":
        b = (src / ST).read_bytes()
        raw = b[: data.draw(st.integers(0, len(b) - 1), label="keep bytes")]
        t = None
    elif kind == "two shards":
        k = data.draw(st.sampled_from(names), label="tensor")
        alter = data.draw(st.booleans(), label="altered copy")
        extra = {k: (tensors[k].flip(0) if alter and tensors[k].dim() else tensors[k]).clone()}
    elif kind == "bad scale":
        scales = [k for k in experts if k.endswith(("weight_scale", "_scales", "global_scale", "input_scale",
                                                    "weight_scale_2"))]
        k = data.draw(st.sampled_from(scales), label="tensor")
        t[k] = _bad_scale(tensors[k], data)
    elif kind == "missing expert":
        layer, e = data.draw(st.integers(0, 2), label="layer"), data.draw(st.integers(0, 7), label="expert")
        gone = _experts(names, layer, e) or [k for k in experts if f"layers.{layer}." in k]
        for k in gone:
            del t[k]
    elif kind == "missing part":
        del t[data.draw(st.sampled_from(experts), label="tensor")]
    else:
        cfg = json.loads(json.dumps(config))
        key = "num_hidden_layers" if kind == "layer count" else next(
            k for k in ("num_local_experts", "num_experts") if k in cfg)
        cfg[key] = cfg[key] + data.draw(st.sampled_from([-1, 1, 2]), label="delta")
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "ckpt"
        write(f, src, tensors=t, config=cfg, raw=raw)
        if extra is not None:
            save_file(extra, str(f / "zz-extra.safetensors"))
        one_line_refusal(*check(f))


# ---- corruptions the harness may read, if it reads them right


CONFIG_EDITS = [
    ("quantization_config", "quant_method", ["compressed-tensors", "modelopt", "quark", "mxfp4", "fp8", 3, None]),
    ("quantization_config", "format", ["nvfp4-pack-quantized", "mxfp4-pack-quantized", "float-quantized", 1]),
    ("quantization_config", "quant_algo", ["NVFP4", "FP8", None]),
    ("model_type", None, ["gpt_oss", "qwen3_moe", "mixtral", 7]),
    ("mlp_only_layers", None, [[], [0], [2], "0"]),
    ("decoder_sparse_step", None, [1, 2, 0, "1"]),
    ("num_experts", None, [8, None, 7, "8"]),
]


def _edit_config(cfg, data):
    top, key, choices = data.draw(st.sampled_from(CONFIG_EDITS), label="config edit")
    value = data.draw(st.sampled_from(choices), label="value")
    if key is None:
        cfg[top] = value
    elif isinstance(cfg.get(top), dict):
        if value is None:
            cfg[top].pop(key, None)
        else:
            cfg[top][key] = value
    return cfg


@SETTINGS
@given(data=st.data())
def test_corruptions_refused_or_read_exactly(data):
    case = data.draw(st.sampled_from(CASES), label="case")
    src, tensors, config = source(case)
    kind = data.draw(st.sampled_from(["header garbage", "dtype", "shape", "data byte", "config"]), label="kind")
    names = sorted(tensors)
    t, cfg, raw = dict(tensors), None, None
    if kind == "header garbage":
        b = bytearray((src / ST).read_bytes())
        hlen = 8 + struct.unpack("<Q", bytes(b[:8]))[0]
        for _ in range(data.draw(st.integers(1, 4), label="bytes")):
            b[data.draw(st.integers(0, hlen - 1), label="at")] = data.draw(st.integers(0, 255), label="byte")
        raw, t = bytes(b), None
    elif kind == "dtype":
        k = data.draw(st.sampled_from(names), label="tensor")
        to = data.draw(st.sampled_from([torch.float32, torch.bfloat16, torch.uint8, torch.int8, torch.float8_e4m3fn,
                                        torch.float16]), label="dtype")
        t[k] = tensors[k].view(to) if tensors[k].element_size() == to.itemsize and tensors[k].dim() else \
            tensors[k].to(to)
    elif kind == "shape":
        k = data.draw(st.sampled_from([n for n in names if ".experts." in n]), label="tensor")
        v = tensors[k]
        how = data.draw(st.sampled_from(["flatten", "drop row", "add dim", "transpose"]), label="how")
        t[k] = (v.reshape(-1) if how == "flatten" else v[:-1] if how == "drop row" and v.dim() and v.shape[0] > 1
                else v.unsqueeze(0) if how == "add dim" else v.t() if v.dim() == 2 else v.reshape(1, -1)).contiguous()
    elif kind == "data byte":
        b = bytearray((src / ST).read_bytes())
        hlen = 8 + struct.unpack("<Q", bytes(b[:8]))[0]
        at = data.draw(st.integers(hlen, len(b) - 1), label="at")
        b[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        raw, t = bytes(b), None
    else:
        cfg = _edit_config(json.loads(json.dumps(config)), data)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "ckpt"
        write(f, src, tensors=t, config=cfg, raw=raw)
        rc, err = check(f)
        refused_or_exact(f, rc, err)
        event(f"{kind}: {'refused' if rc == 2 else 'read exactly'}")
