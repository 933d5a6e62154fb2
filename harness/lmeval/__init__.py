"""lm-eval accuracy runs for quantized MoE emulation.

Modules (one job each):
  offline     -- environment for fully offline runs (no hub access, private caches)
  tokenizer   -- the bundled character-level tokenizer (built with `tokenizers`)
  corpus      -- the seeded synthetic arithmetic corpus and the held-out task items
  tiny_model  -- the tiny Qwen3-MoE configuration and its bundled location
  train       -- `moe-harness train-tiny`: deterministic CPU training
  moe_swap    -- find the sparse-MoE blocks of a HF model, replace them with harness.moe
  calibrate   -- static activation amax calibration (nvfp4 global scales)
  adapter     -- the lm-eval model `moe-emu`
  config      -- accuracy config parsing and validation (vLLM format + harness fields)
  gates       -- one-sided, paired (McNemar / bootstrap) and KL gates
  kl          -- per-token KL between emulated and baseline next-token distributions
  evaluate    -- runs one config: lm-eval, KL, gates
  report      -- writes reports/<ts>/lm_eval/
  command     -- `moe-harness eval`
  bench       -- `moe-harness bench eval`

Heavy imports (torch, transformers, lm_eval) happen inside these modules only,
so `import harness.lmeval` stays cheap.
"""

BUNDLED_MODEL_NAME = "tiny-moe"


def run_tiny_all_schemes(report_dir, limit=None, schemes=None):
    """Run the tiny-model evaluation for every scheme; used by `moe-harness run`."""
    from .evaluate import run_tiny_all_schemes as _run

    return _run(report_dir, limit=limit, schemes=schemes)
