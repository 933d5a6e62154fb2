"""vLLM's own lm-eval configs for the FP4 MoE models, as facts (model id,
tasks and metrics, the extra keys each sets), written here from vLLM's
.buildkite/lm-eval-harness/configs/ (not copies of its files); and the
small helpers the tests of configs share (write one, read a one-line
refusal)."""
from __future__ import annotations

from pathlib import Path

import yaml

GSM8K = [{"name": "exact_match,strict-match", "value": 0.89}, {"name": "exact_match,flexible-extract", "value": 0.89}]
# vLLM's configs as of this writing: model id, tasks and metrics, the extra keys each sets.
VLLM_CONFIGS = {
    "DeepSeek-R1-NVFP4": {"model_name": "nvidia/DeepSeek-R1-NVFP4", "tasks": [{"name": "gsm8k", "metrics": GSM8K}],
                          "limit": 1319, "num_fewshot": 5, "kv_cache_dtype": "nvfp4",
                          "attention_backend": "FLASHINFER_MLA", "env_vars": {"VLLM_USE_FLASHINFER_MOE_FP4": "0"}},
    "Qwen3-30B-A3B-NVFP4": {"model_name": "nvidia/Qwen3-30B-A3B-NVFP4", "tasks": [{"name": "gsm8k", "metrics": GSM8K}],
                            "limit": 1319, "num_fewshot": 5, "kv_cache_dtype": "nvfp4"},
    "Llama-4-Scout-NVFP4": {"model_name": "RedHatAI/Llama-4-Scout-17B-16E-Instruct-NVFP4",
                            "tasks": [{"name": "gsm8k", "metrics": GSM8K}], "limit": 1319, "num_fewshot": 5},
    "gpt-oss-120b": {"model_name": "openai/gpt-oss-120b", "trust_remote_code": True,
                     "tasks": [{"name": "aime25", "metrics": [{"name": "exact_match", "value": 0.80}]}],
                     "limit": 250, "num_fewshot": 0, "max_model_len": 131072, "batch_size": 1,
                     "gen_kwargs": "temperature=1.0,top_p=1.0,top_k=0", "apply_chat_template": True},
    "Mixtral-8x7B-Instruct-v0.1": {"model_name": "mistralai/Mixtral-8x7B-Instruct-v0.1",
                                   "tasks": [{"name": "gsm8k", "metrics": [
                                       {"name": "exact_match,strict-match", "value": 0.616},
                                       {"name": "exact_match,flexible-extract", "value": 0.632}]}],
                                   "limit": 250, "num_fewshot": 5},
    "DeepSeek-V4-Flash-MXFP4": {"model_name": "amd/DeepSeek-V4-Flash-MXFP4", "tasks": [{"name": "gsm8k", "metrics": GSM8K}],
                                "limit": 1319, "num_fewshot": 8, "max_model_len": 8192, "kv_cache_dtype": "fp8",
                                "moe_backend": "aiter", "jit_monitor_mode": "error", "enforce_eager": False,
                                "trust_remote_code": True, "tokenizer_mode": "deepseek_v4",
                                "required_gpu_arch": ["gfx950"], "env_vars": {"VLLM_ROCM_USE_AITER": "1"}},
    "Qwen3-235B-A22B-Instruct-2507-FP8": {
        "model_name": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "env_vars": {"VLLM_USE_NCCL_SYMM_MEM": "1"},
        "tasks": [{"name": "mmlu_pro", "metrics": [{"name": "exact_match,custom-extract", "value": 0.82}]}],
        "limit": 250, "num_fewshot": 5, "enforce_eager": False, "kv_cache_dtype": "fp8", "max_model_len": 40960,
        "apply_chat_template": True, "fewshot_as_multiturn": True,
        "gen_kwargs": "temperature=0,top_p=1,top_k=0,max_gen_toks=5632,until=<|ENDANSWER|>"},
}


def write(tmp_path, data, name="cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
