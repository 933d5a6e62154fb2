"""Checkpoint-built layers of the tiny family models: the gpt-oss MXFP4
layout of the tiny gpt_oss model (interleaved gate/up, per-expert biases,
router bias, clamped SwiGLU) and llmcompressor's compressed-tensors MXFP4
of the tiny DeepSeek-V3 model (shared expert quantized like the routed ones,
router e_score_correction_bias) read into the harness FusedMoE.

The proof: the layer built from the checkpoint equals, bit for bit, the
layer the harness builds directly from the float model (the same quantizer
gives the same codes and scale bytes; the biases are stored unquantized) --
every code, scale byte, bias, shared expert, correction bias, routing
option, and the forward output on seeded inputs; the biases, shared expert
and correction bias in the layer are the checkpoint's (an edited file value
moves the layer's); and every refused input is one
CheckpointFormatError naming the file, the tensor and what was expected."""
import json

import pytest
import torch

from harness.checkpoints import float_experts, make_gptoss, producers, read_gptoss
from harness.checkpoints.errors import CheckpointFormatError
from harness.checkpoints.make import source_dir
from harness.emulation import checkpoint_blocks, families
from harness.emulation.moe_swap import Swapper
from harness.moe.layer import build_emulated_moe
from harness.moe.schemes import get_scheme

from suites.checkpoints.corrupt import copy, refused
from suites.checkpoints.producer_checkpoints import made

P, S = "gpt-oss@tiny-gpt_oss", "mxfp4"
SCHEME = "w_mxfp4"  # what the gpt-oss layout runs as (read_gptoss.SCHEME: W4A16)
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


FAMILY_ROWS = [(p, s) for p, r in producers.PRODUCERS.items() if r.model for s in r.schemes]


def _activation_scales(layer) -> dict:
    """The encode-side activation global scales a layer runs with (two-level schemes), by the
    keyword names build_emulated_moe takes; {} for the others."""
    out = {}
    for prefix, qc in (("", layer.quant_config), ("shared_", layer.shared_quant_config)):
        if qc is not None and qc.a1_gscale is not None:
            out[prefix + "a1_gscale"], out[prefix + "a2_gscale"] = qc.a1_gscale, qc.a2_gscale
    return out


def _take_producer_global_scales(direct, ck) -> None:
    """A producer computes a weight global scale 448 * 6 / amax its own way (llm-compressor's
    order of operations; ModelOpt stores it decode side, fl(1 / gs)): read back it is the
    harness' value or one ulp from it. Checked so, then the direct layer takes the
    checkpoint's: the rest of its forward must then be the checkpoint layer's bit for bit."""
    import dataclasses

    from harness.moe.experts import make_experts

    for which, qc_of in (("experts", lambda m: m.quant_config), ("shared_experts", lambda m: m.shared_quant_config)):
        a, b = qc_of(direct), qc_of(ck)
        if a is None:
            continue
        for f in ("w13_gscale", "w2_gscale"):
            x, y = getattr(a, f), getattr(b, f)
            ulp = torch.nextafter(x, torch.full_like(x, float("inf"))) - x
            assert ((x - y).abs() <= ulp).all(), (which, f)
        swapped = dataclasses.replace(a, w13_gscale=b.w13_gscale, w2_gscale=b.w2_gscale)
        setattr(direct, which, make_experts(swapped, backend=getattr(direct, which).backend))


@pytest.mark.parametrize("producer,scheme", FAMILY_ROWS, ids=[f"{p}-{s}" for p, s in FAMILY_ROWS])
def test_checkpoint_layer_equals_the_direct_build_bit_for_bit(producer, scheme):
    """Routed experts (codes, scale bytes), their biases, the shared expert, the
    router's correction bias, the routing row and the forward output."""
    row = producers.get(producer)
    folder = made(producer, scheme)
    sw = _swapper(producer)
    hscheme, mods = checkpoint_blocks.build(sw, str(folder), row.fmt)
    assert hscheme == producers.harness_scheme(producer, scheme)
    # A two-level scheme's activation global scales are the producer's calibration, not a
    # function of the weights: the direct build takes the checkpoint's (everything else it
    # quantizes itself from the float model).
    sw.build(hscheme, build_emulated_moe, scales={n: _activation_scales(m.emulated) for n, m in mods.items()})
    gen = torch.Generator().manual_seed(0)
    assert sw.specs
    for spec in sw.specs:
        direct, ck = sw.built[hscheme][spec.name].emulated, mods[spec.name].emulated
        assert ck.arch == direct.arch, spec.name
        pairs = [(direct.quant_config, ck.quant_config)]
        if direct.shared_experts is not None:
            pairs.append((direct.shared_quant_config, ck.shared_quant_config))
        for a, b in pairs:
            for q in ("w13_q", "w2_q"):
                assert torch.equal(getattr(a, q).codes, getattr(b, q).codes), (spec.name, q)
                assert torch.equal(getattr(a, q).scales, getattr(b, q).scales), (spec.name, q)
                assert getattr(a, q).scale_mode == getattr(b, q).scale_mode
        a, b = pairs[0]
        for bias in ("w13_bias", "w2_bias"):
            if getattr(a, bias) is None:
                assert getattr(b, bias) is None
            else:
                assert getattr(b, bias).dtype == torch.float32 and torch.equal(getattr(a, bias), getattr(b, bias))
        if direct.e_score_correction_bias is not None:
            assert torch.equal(direct.e_score_correction_bias, ck.e_score_correction_bias)
        if get_scheme(hscheme).two_level:
            _take_producer_global_scales(direct, ck)
        hidden = torch.randn(64, spec.hidden, generator=gen) * 2
        logits = mods[spec.name].router_logits(hidden)
        assert torch.equal(logits, sw.built[hscheme][spec.name].router_logits(hidden))
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
    assert not any(k.endswith(("experts.gate_up_proj", "experts.down_proj")) for k in shapes)
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


@pytest.mark.parametrize("producer,scheme", FAMILY_ROWS, ids=[f"{p}-{s}" for p, s in FAMILY_ROWS])
def test_eval_of_the_checkpoint_has_oracle_kl_exactly_zero_and_the_direct_kl(producer, scheme):
    """`moe-harness eval` of the row's config (20 documents): the certified-oracle
    KL is exactly 0 and the KL against bf16 is the one of the harness' own
    quantization of the same model (its tiny-<model_type>-<scheme>.yaml), to the
    last bit, where the scheme has no calibrated activation scales (NVFP4's are
    the producer's own: that KL is the config's gate alone)."""
    pytest.importorskip("lm_eval", reason="the eval needs lm-eval (pip install -e '.[lmeval]')")
    from harness.lmeval import config as C
    from harness.lmeval.configs import CONFIG_DIR, config_name, tiny_family_config_path
    from harness.lmeval.evaluate import Session, run_config
    from harness.models import tiny_families

    made(producer, scheme)
    session = Session(disable_tqdm=True)
    r = run_config(C.load(CONFIG_DIR / config_name(producer, scheme)), session=session)
    assert r["passed"] and not r.get("skipped"), r["message"]
    d = r["details"]
    assert d["kl_oracle"]["mean_kl"] == 0.0 and d["kl_oracle"]["max_token_kl"] == 0.0
    assert d["kl_oracle"]["certification"]["outside"] == 0
    assert d["kl"]["mean_kl"] > 0
    hscheme = producers.harness_scheme(producer, scheme)
    if get_scheme(hscheme).needs_act_gscale:
        return  # its activation scales are the producer's calibration: a KL of its own (gated by the config)
    model_type = tiny_families.TINY_FAMILIES[producers.get(producer).model].model_type
    direct = run_config(C.load(tiny_family_config_path(model_type, hscheme)), session=session)
    assert d["kl"]["mean_kl"] == direct["details"]["kl"]["mean_kl"]


# ---- DeepSeek-V3 (llmcompressor): the shared expert and the router's correction bias

DS = "llmcompressor@tiny-deepseek_v3"
DS_BLOCK = "model.layers.1.mlp"
SHARED = f"{DS_BLOCK}.shared_experts"
CORR = f"{DS_BLOCK}.gate.e_score_correction_bias"


def _ds_build(folder):
    sw = _swapper(DS)
    return checkpoint_blocks.build(sw, str(folder), "compressed-tensors")[1]


def _ds_refused(folder, *needles):
    with pytest.raises(CheckpointFormatError) as e:
        _ds_build(folder)
    msg = str(e.value)
    assert "\n" not in msg and str(folder) in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_deepseek_correction_bias_is_the_checkpoints(tmp_path):
    def edit(t):
        t[CORR] = t[CORR].clone()
        t[CORR][3] += 0.5
    f = copy(tmp_path, DS, "mxfp4", tensors=edit)
    from safetensors.torch import load_file

    got = _ds_build(f)[DS_BLOCK].emulated.e_score_correction_bias
    assert torch.equal(got, load_file(str(f / "model.safetensors"))[CORR])


def test_deepseek_shared_expert_is_read_from_the_checkpoint(tmp_path):
    """Two codes of the shared expert's gate swapped in the file: the layer's shared codes move with them."""
    name = f"{SHARED}.gate_proj.weight_packed"

    def edit(t):
        t[name] = t[name].clone()
        t[name][0, 0] = (t[name][0, 0] & 0xF0) | ((t[name][0, 0] + 1) & 0x0F)
    f = copy(tmp_path, DS, "mxfp4", tensors=edit)
    ref = _ds_build(made(DS, "mxfp4"))[DS_BLOCK].emulated.shared_quant_config.w13_q.codes
    got = _ds_build(f)[DS_BLOCK].emulated.shared_quant_config.w13_q.codes
    assert not torch.equal(got, ref) and torch.equal(got[0, 1:], ref[0, 1:]) and torch.equal(got[0, 0, 1:], ref[0, 0, 1:])


@pytest.mark.parametrize("edit,needles", [
    (lambda t: [t.pop(k) for k in list(t) if k.startswith(SHARED + ".")],
     [f"{SHARED}.gate_proj", "deepseek_v3 block's shared expert ([2S, H] = [128, 64]", "no tensor under"]),
    (lambda t: t.pop(f"{SHARED}.up_proj.weight_scale"),
     [f"{SHARED}.up_proj.weight_scale", "the shared expert's gate, up, down", "missing"]),
    (lambda t: [t.pop(f"{SHARED}.down_proj.{p}") for p in ("weight_packed", "weight_scale")]
     + [t.update({f"{SHARED}.down_proj.weight": torch.zeros(64, 64)})],
     [f"{SHARED}.down_proj.weight_packed", "missing"]),
    (lambda t: t.update({f"{SHARED}.gate_proj.weight_packed": t[f"{SHARED}.gate_proj.weight_packed"][:32].contiguous(),
                         f"{SHARED}.gate_proj.weight_scale": t[f"{SHARED}.gate_proj.weight_scale"][:32].contiguous()}),
     [f"{SHARED} (shared expert)", "w13 [E, 2I, H] = [1, 128, 64]", "got [1, 96, 64]"]),
    (lambda t: t.pop(CORR), [CORR, "correction bias [8]", "missing"]),
    (lambda t: t.update({CORR: t[CORR][:7].contiguous()}), [CORR, "shape (8,), got (7,)"]),
    (lambda t: t[CORR].__setitem__(5, float("inf")), [CORR, "finite values, got inf at expert 5"]),
], ids=["shared-missing", "shared-part-missing", "shared-left-float", "shared-gate-up-shapes",
        "correction-missing", "correction-shape", "correction-inf"])
def test_deepseek_bad_shared_expert_or_correction_bias_is_refused(tmp_path, edit, needles):
    _ds_refused(copy(tmp_path, DS, "mxfp4", tensors=edit), *needles)


def test_a_shared_expert_in_the_gpt_oss_layout_is_refused(tmp_path):
    """The gpt-oss layout stores fused routed experts only: a block whose family has a
    shared expert cannot be built from it (the tiny DeepSeek-V3 never is; the
    refusal is load.read_shared's, exercised on a gpt-oss folder)."""
    from harness.checkpoints import load
    from harness.checkpoints.files import CheckpointFiles

    f = copy(tmp_path, P, S, tensors=lambda t: t.update({"model.layers.0.mlp.shared_experts.gate_proj.weight":
                                                          torch.zeros(64, 64)}))
    with pytest.raises(CheckpointFormatError) as e:
        load.read_shared(CheckpointFiles(f), "gpt-oss", "model.layers.0.mlp.shared_experts", SCHEME)
    assert "no shared expert in the gpt-oss layout" in str(e.value)
