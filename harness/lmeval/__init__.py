"""lm-eval accuracy runs for quantized MoE emulation.

Modules (one job each):
  offline     -- environment for fully offline runs (no hub access, private caches)
  tokenizer   -- the bundled character-level tokenizer (built with `tokenizers`)
  corpus      -- the seeded synthetic arithmetic corpus and the held-out task items
  tiny_model  -- the tiny Qwen3-MoE configuration and its bundled location
  train       -- `moe-harness train-tiny`: deterministic CPU training
  builder     -- where the emulation layer comes from (harness.moe.build_emulated_moe)
  moe_swap    -- find the sparse-MoE blocks of a HF model, replace them with harness.moe
  calibrate   -- static activation amax calibration (nvfp4 global scales)
  adapter     -- the lm-eval model `moe-emu`
  config      -- accuracy config parsing and validation (vLLM format + harness fields)
  gates       -- one-sided, paired (McNemar / bootstrap) and KL gates
  kl          -- per-token KL between emulated and baseline next-token distributions
  tasks       -- the local lm-eval tasks (suites/lm_eval/tasks/) and their TaskManager
  evaluate    -- runs one config: lm-eval, KL, gates; run_tiny_all_schemes
  report      -- writes reports/<ts>/lm_eval/
  expected    -- renders the tiny configs' expected values from a measured run
  measure     -- the full measurement run behind those values
  command     -- `moe-harness eval`
  bench       -- `moe-harness bench eval`

Heavy imports (torch, transformers, lm_eval) happen inside these modules only,
so `import harness.lmeval` stays cheap.
"""

BUNDLED_MODEL_NAME = "tiny-moe"


def run_tiny_all_schemes(report_dir, limit=200, schemes=None):
    """Run the tiny-model evaluation for every scheme (first `limit` items of each
    task; the KL gate always reads its fixed documents); used by `moe-harness run`.
    Writes <report_dir>/lm_eval/ and returns one result dict per scheme:
    {name, passed, skipped, message, details, time}."""
    from .evaluate import run_tiny_all_schemes as _run

    return _run(report_dir, limit=limit, schemes=schemes)
