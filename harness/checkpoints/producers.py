"""The producer table: which library makes which scheme, in which format, and
which harness MoE scheme evaluates it. One row per producer; behaviour reads
the row.

`available(p)` says whether the producer's libraries are installed here, and
why not: absence is reported (a skip with that reason), never hidden.
"""
from __future__ import annotations

import importlib
import importlib.util
import importlib.metadata as md
from dataclasses import dataclass

from harness.models.tiny_model import BUNDLED_MODEL_NAME


@dataclass(frozen=True)
class Producer:
    name: str
    dists: tuple            # distributions whose versions key the cache
    imports: tuple          # modules the maker imports
    maker: str              # module with make(scheme, out_dir, texts) -> dict
    fmt: str                # format family the reader recognises (detect.py)
    schemes: dict           # producer scheme -> harness MoE scheme
    note: str = ""
    model: str | None = None  # the float model it quantizes: a tiny family model's name
                              # (harness/models/tiny_families.py); None: the bundled tiny MoE

    @property
    def model_name(self) -> str:
        """The accuracy configs' model_name of the float model."""
        return self.model or BUNDLED_MODEL_NAME


PRODUCERS = {
    "llmcompressor": Producer(
        "llmcompressor", ("llmcompressor", "compressed-tensors", "transformers"),
        ("llmcompressor", "compressed_tensors"), "harness.checkpoints.make_llmcompressor",
        "compressed-tensors", {"nvfp4": "nvfp4", "mxfp4": "w_mxfp4_a_mxfp4"}),
    "quark": Producer(
        "quark", ("amd-quark", "transformers"), ("quark.torch",), "harness.checkpoints.make_quark",
        "quark", {"mxfp4": "w_mxfp4_a_mxfp4", "mxfp6_e2m3": "w_mxfp6_e2m3_a_mxfp6_e2m3",
                  "mxfp6_e3m2": "w_mxfp6_e3m2_a_mxfp6_e3m2"},
        note="no mxfp8: amd-quark 0.13's real_quantized export of OCP_MXFP8E4M3Spec weights raises "
             "'Unsupported QuantSchema: per_group for quant_dtype: fp8_e4m3' (hw_emulation "
             "real_quantize_fp8_e4m3); read_quark still reads fp8_e4m3 MX weights"),
    "modelopt": Producer(
        "modelopt", ("nvidia-modelopt", "transformers"), ("modelopt.torch.quantization",),
        "harness.checkpoints.make_modelopt", "modelopt", {"nvfp4": "nvfp4"}),
    "gpt-oss": Producer(
        "gpt-oss", ("moe-harness", "transformers"), ("transformers.integrations.mxfp4",),
        "harness.checkpoints.make_gptoss", "gpt-oss", {"mxfp4": "w_mxfp4"},
        note="no bf16 -> MXFP4 converter runs on CPU (transformers' Mxfp4HfQuantizer quantizes with "
             "triton_kernels on a GPU; the gpt-oss package ships no quantizer): the harness' own quantizer "
             "writes the *_blocks/*_scales layout, and transformers' convert_moe_packed_tensors reads it back"),
    # the tiny gpt_oss family model (interleaved gate/up, expert biases, router bias, clamped SwiGLU)
    # in the same layout, its biases written as transformers' GptOssExperts holds them
    "gpt-oss@tiny-gpt_oss": Producer(
        "gpt-oss@tiny-gpt_oss", ("moe-harness", "transformers"), ("transformers.integrations.mxfp4",),
        "harness.checkpoints.make_gptoss", "gpt-oss", {"mxfp4": "w_mxfp4"},
        note="the tiny gpt_oss family model (random, seeded) in the gpt-oss MXFP4 layout with its "
             "gate_up_proj_bias / down_proj_bias, written by the harness' own quantizer (no CPU converter "
             "exists, see the gpt-oss row)", model="tiny-gpt_oss"),
    # the tiny deepseek_v3 family model: shared expert quantized like the routed ones, router
    # e_score_correction_bias kept float
    "llmcompressor@tiny-deepseek_v3": Producer(
        "llmcompressor@tiny-deepseek_v3", ("llmcompressor", "compressed-tensors", "transformers"),
        ("llmcompressor", "compressed_tensors"), "harness.checkpoints.make_llmcompressor",
        "compressed-tensors", {"mxfp4": "w_mxfp4_a_mxfp4"}, model="tiny-deepseek_v3"),
    # the tiny llama4_text family model as RedHatAI's Llama-4-Scout NVFP4 is made: per-expert
    # Linear names, the shared expert quantized, the router float (make_llmcompressor.py)
    "llmcompressor@tiny-llama4_text": Producer(
        "llmcompressor@tiny-llama4_text", ("llmcompressor", "compressed-tensors", "transformers"),
        ("llmcompressor", "compressed_tensors"), "harness.checkpoints.make_llmcompressor",
        "compressed-tensors", {"nvfp4": "nvfp4"}, model="tiny-llama4_text"),
    # the same model as NVIDIA's DeepSeek-R1-NVFP4 is made: ModelOpt NVFP4 (max calibration),
    # routed and shared experts quantized, the dense first layer float
    "modelopt@tiny-deepseek_v3": Producer(
        "modelopt@tiny-deepseek_v3", ("nvidia-modelopt", "transformers"), ("modelopt.torch.quantization",),
        "harness.checkpoints.make_modelopt", "modelopt", {"nvfp4": "nvfp4"}, model="tiny-deepseek_v3"),
}


def get(name: str) -> Producer:
    try:
        return PRODUCERS[name]
    except KeyError:
        raise ValueError(f"unknown producer {name!r}; expected one of {', '.join(PRODUCERS)}") from None


def harness_scheme(producer: str, scheme: str) -> str:
    p = get(producer)
    if scheme not in p.schemes:
        raise ValueError(f"producer {producer} has no scheme {scheme!r}; expected one of {', '.join(p.schemes)}")
    return p.schemes[scheme]


def versions(p: Producer) -> dict:
    return {d: md.version(d) for d in p.dists}


def available(name: str) -> tuple[bool, str]:
    """(True, versions) or (False, the reason: which package is missing or fails to import)."""
    p = get(name)
    try:
        v = versions(p)
    except md.PackageNotFoundError as e:
        return False, f"{name}: package {e.args[0]} is not installed (pip install -e '.[producers]')"
    for mod in p.imports:
        # found, not imported: producer imports patch transformers globally (make_worker.py),
        # so they happen only in the maker's own process; an import failure there is reported.
        try:
            # the top-level name only: find_spec of a submodule imports its parents
            found = importlib.util.find_spec(mod.split(".")[0]) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return False, f"{name}: module {mod} is not importable here"
    return True, ", ".join(f"{k} {x}" for k, x in v.items())


def version_key(p: Producer) -> str:
    return "+".join(f"{d}{v}" for d, v in versions(p).items())
