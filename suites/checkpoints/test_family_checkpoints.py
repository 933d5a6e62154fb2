"""Checkpoint-built layers of the tiny family models: the gpt-oss MXFP4
layout of the tiny gpt_oss model (interleaved gate/up, per-expert biases,
router bias, clamped SwiGLU) read into the harness FusedMoE.

The proof: the layer built from the checkpoint equals, bit for bit, the
layer the harness builds directly from the float model (the same quantizer
gives the same codes and scale bytes; the biases are stored unquantized) --
every code, scale byte, bias, routing option, and the forward output on
seeded inputs; the biases in the layer are the checkpoint's (an edited
file bias moves the layer's); and every refused input is one
CheckpointFormatError naming the file, the tensor and what was expected."""
import json

import pytest
import torch

from harness.checkpoints import float_experts, make_gptoss, read_gptoss
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.make import source_dir
from harness.emulation import checkpoint_blocks, families
from harness.emulation.moe_swap import Swapper
from harness.moe.layer import build_emulated_moe

from suites.checkpoints.corrupt import copy, refused
from suites.checkpoints.producer_checkpoints import made

P, S = "gpt-oss@tiny-gpt_oss", "mxfp4"
SCHEME = "w_mxfp4_a_mxfp4"
B0 = "model.layers.0.mlp.experts"


def _swapper(producer=P):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(source_dir(producer)), dtype=torch.float32,
                                                 local_files_only=True).eval()
    return Swapper.attach(model)


def _build(folder, producer=P):
    sw = _swapper(producer)
    scheme, mods = checkpoint_blocks.build(sw, str(folder), "gpt-oss")
    return sw, scheme, mods


def test_checkpoint_layer_equals_the_direct_build_bit_for_bit():
    sw, scheme, mods = _build(made(P, S))
    assert scheme == SCHEME
    sw.build(SCHEME, build_emulated_moe)
    gen = torch.Generator().manual_seed(0)
    assert len(sw.specs) == 2
    for spec in sw.specs:
        direct, ck = sw.built[SCHEME][spec.name].emulated, mods[spec.name].emulated
        assert ck.arch == direct.arch and ck.arch.expert_bias and ck.arch.activation == "swiglu_clamp"
        a, b = direct.quant_config, ck.quant_config
        for q in ("w13_q", "w2_q"):
            assert torch.equal(getattr(a, q).codes, getattr(b, q).codes), (spec.name, q)
            assert torch.equal(getattr(a, q).scales, getattr(b, q).scales), (spec.name, q)
            assert getattr(a, q).scale_mode == getattr(b, q).scale_mode
        for bias in ("w13_bias", "w2_bias"):
            assert getattr(b, bias).dtype == torch.float32
            assert torch.equal(getattr(a, bias), getattr(b, bias)), (spec.name, bias)
        hidden = torch.randn(64, spec.hidden, generator=gen) * 2
        logits = mods[spec.name].router_logits(hidden)
        assert torch.equal(logits, sw.built[SCHEME][spec.name].router_logits(hidden))
        out_direct, out_ck = direct(hidden, logits), ck(hidden, logits)
        assert torch.equal(out_direct, out_ck), spec.name
        assert out_ck.abs().sum() > 0


def test_the_layers_biases_are_the_checkpoints(tmp_path):
    """An edited bias in the file (expert 3, up column 5 of layer 0) is the
    layer's bias; nothing is taken from the float model's experts."""
    name = f"{B0}.gate_up_proj_bias"

    def edit(t):
        t[name] = t[name].clone()
        t[name][3, 2 * 5 + 1] += 1.0   # interleaved: column 2j+1 is up j
    f = copy(tmp_path, P, S, tensors=edit)
    _, _, mods = _build(f)
    _, _, ref = _build(made(P, S))
    got = mods["model.layers.0.mlp"].emulated.quant_config.w13_bias
    want = ref["model.layers.0.mlp"].emulated.quant_config.w13_bias.clone()
    inter = want.shape[1] // 2
    want[3, inter + 5] += 1.0
    assert torch.equal(got, want)


def test_biases_missing_when_the_model_has_them_are_refused(tmp_path):
    f = copy(tmp_path, P, S, tensors=lambda t: [t.pop(k) for k in list(t) if k.endswith("_proj_bias")])
    with pytest.raises(CheckpointFormatError) as e:
        _build(f)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg and f"{B0}.gate_up_proj_bias" in msg, msg
    assert "gpt_oss block's expert biases ([8, 128] and [8, 64]" in msg and "missing" in msg, msg


def test_biases_on_a_model_without_them_are_refused(tmp_path):
    """The bundled tiny MoE (qwen3_moe, no expert biases) in the gpt-oss layout with biases added."""
    def add(t):
        for i in range(3):
            t[f"model.layers.{i}.mlp.experts.gate_up_proj_bias"] = torch.zeros(8, 128)
            t[f"model.layers.{i}.mlp.experts.down_proj_bias"] = torch.zeros(8, 64)
    f = copy(tmp_path, "gpt-oss", S, tensors=add)
    with pytest.raises(CheckpointFormatError) as e:
        _build(f, producer="gpt-oss")
    msg = str(e.value)
    assert "model.layers.0.mlp.experts.gate_up_proj_bias" in msg and "no expert biases (a qwen3_moe block" in msg, msg


@pytest.mark.parametrize("edit,needles", [
    (lambda t: t.update({f"{B0}.gate_up_proj_bias": t[f"{B0}.gate_up_proj_bias"][:, :64].contiguous()}),
     [f"{B0}.gate_up_proj_bias", "shape (8, 128), got (8, 64)"]),
    (lambda t: t.update({f"{B0}.down_proj_bias": t[f"{B0}.down_proj_bias"][:7].contiguous()}),
     [f"{B0}.down_proj_bias", "shape (8, 64), got (7, 64)"]),
    (lambda t: t.update({f"{B0}.down_proj_bias": t[f"{B0}.down_proj_bias"].to(torch.int32)}),
     [f"{B0}.down_proj_bias", "dtype torch.float32 or torch.bfloat16 or torch.float16, got torch.int32"]),
    (lambda t: t.update({f"{B0}.down_proj_bias": t[f"{B0}.down_proj_bias"].to(torch.float64)}),
     [f"{B0}.down_proj_bias", "got torch.float64"]),
    (lambda t: t[f"{B0}.down_proj_bias"].__setitem__((2, 7), float("nan")),
     [f"{B0}.down_proj_bias", "finite bias values (expert 2)", "nan at column 7"]),
    (lambda t: t.pop(f"{B0}.down_proj_bias"),
     [f"{B0}.down_proj_bias", f"{B0}.gate_up_proj_bias is present", "come together"]),
    (lambda t: [t.pop(f"model.layers.1.mlp.experts.{p}_bias") for p in ("gate_up_proj", "down_proj")],
     ["model.layers.1.mlp.experts.gate_up_proj_bias", "every MoE layer or in none (model.layers.0.mlp has them)"]),
], ids=["gate_up-shape", "down-experts", "int-dtype", "float64", "nan", "one-of-two", "one-layer-only"])
def test_bad_biases_are_refused_by_the_reader(tmp_path, edit, needles):
    f = copy(tmp_path, P, S, tensors=edit)
    msg = refused(f, *needles)
    assert str(f) in msg


def test_bfloat16_biases_load_exactly(tmp_path):
    """A bf16 bias (the real gpt-oss checkpoints' dtype) loads as its exact float32 value."""
    names = [f"{B0}.gate_up_proj_bias", f"{B0}.down_proj_bias"]
    f = copy(tmp_path, P, S, tensors=lambda t: t.update({n: t[n].to(torch.bfloat16) for n in names}))
    from harness.checkpoints.load import load_checkpoint

    qc = load_checkpoint(f).quant_configs["model.layers.0.mlp"]
    from safetensors.torch import load_file

    t = load_file(str(f / "model.safetensors"))
    assert torch.equal(qc.w13_bias, read_gptoss.deinterleave(t[names[0]].to(torch.float32)))
    assert torch.equal(qc.w2_bias, t[names[1]].to(torch.float32))


def test_the_maker_writes_transformers_layout():
    """Names, dtypes and shapes of the made checkpoint as transformers' gpt_oss reads them:
    gate_up rows interleaved in blocks, scales and bias alike."""
    from safetensors import safe_open

    folder = made(P, S)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "gpt_oss" and cfg["quantization_config"]["quant_method"] == "mxfp4"
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        shapes = {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}
    E, H, I = 8, 64, 64
    assert shapes[f"{B0}.gate_up_proj_blocks"] == ((E, 2 * I, H // 32, 16), "U8")
    assert shapes[f"{B0}.gate_up_proj_scales"] == ((E, 2 * I, H // 32), "U8")
    assert shapes[f"{B0}.gate_up_proj_bias"] == ((E, 2 * I), "F32")
    assert shapes[f"{B0}.down_proj_blocks"] == ((E, H, I // 32, 16), "U8")
    assert shapes[f"{B0}.down_proj_bias"] == ((E, H), "F32")
    assert shapes["model.layers.0.mlp.router.bias"] == ((E,), "F32")
    assert not any(k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj") for k in shapes)
    # the file's interleaved bias is the float model's own gate_up_proj_bias, column for column
    from safetensors.torch import load_file

    src = load_file(str(source_dir(P) / "model.safetensors"))
    ck = load_file(str(folder / "model.safetensors"))
    assert torch.equal(ck[f"{B0}.gate_up_proj_bias"], src[f"{B0}.gate_up_proj_bias"])
    assert torch.equal(make_gptoss.interleave(torch.arange(4.).reshape(1, 2, 2), torch.ones(1, 2, 2)),
                       torch.tensor([[[0., 1.], [1., 1.], [2., 3.], [1., 1.]]]))


def test_fused_source_layouts_agree_with_the_family_rows():
    """float_experts.FUSED (the makers' reading of a float model) restates the
    layout facts of harness/emulation/families.py (the swap's): they must agree."""
    for model_type, row in float_experts.FUSED.items():
        fam = families.FAMILIES[model_type]
        assert (row.gate_up, row.down, row.transposed, row.interleaved) == \
            (fam.gate_up, fam.down, fam.transposed, fam.interleaved), model_type
        assert (row.gate_up_bias, row.down_bias, row.router) == (fam.gate_up_bias, fam.down_bias, fam.router)


def test_eval_of_the_checkpoint_has_oracle_kl_exactly_zero_and_the_direct_kl():
    """`moe-harness eval` of producer-gpt-oss@tiny-gpt_oss-mxfp4.yaml (20 documents):
    the certified-oracle KL is exactly 0 and the KL against bf16 is the one of the
    harness' own quantization of the same model (tiny-gpt_oss-w_mxfp4_a_mxfp4.yaml),
    to the last bit."""
    pytest.importorskip("lm_eval", reason="the eval needs lm-eval (pip install -e '.[lmeval]')")
    from harness.lmeval import config as C
    from harness.lmeval.configs import CONFIG_DIR, config_name, tiny_family_config_path
    from harness.lmeval.evaluate import Session, run_config

    made(P, S)
    session = Session(disable_tqdm=True)
    r = run_config(C.load(CONFIG_DIR / config_name(P, S)), session=session)
    assert r["passed"] and not r.get("skipped"), r["message"]
    d = r["details"]
    assert d["kl_oracle"]["mean_kl"] == 0.0 and d["kl_oracle"]["max_token_kl"] == 0.0
    assert d["kl_oracle"]["certification"]["outside"] == 0
    direct = run_config(C.load(tiny_family_config_path("gpt_oss", SCHEME)), session=session)
    assert d["kl"]["mean_kl"] == direct["details"]["kl"]["mean_kl"] > 0
