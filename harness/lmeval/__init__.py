"""lm-eval accuracy runs for quantized MoE emulation (floor 7).

Modules (one job each):
  adapter     -- the lm-eval model `moe-emu` (a transformers model with emulated MoE blocks)
  config      -- accuracy config parsing and validation (vLLM format + harness fields)
  checkpoint_config -- the folder of a config's `harness.checkpoint`, found at run time
  configs     -- where the shipped configs live (tiny-<scheme>, tiny-<model_type>-<scheme>,
                 producer-<producer>-<scheme>)
  schemes     -- the names a config may use, importable without torch
  task_names  -- which task names a config may use, found without importing lm-eval
  tasks       -- the local lm-eval tasks (suites/lm_eval/tasks/) and their TaskManager
  gates       -- one-sided, paired (McNemar / bootstrap) and KL gates
  kl          -- per-token KL between emulated and baseline next-token distributions
  evaluate    -- runs one config: lm-eval, KL, gates; run_tiny_all_schemes
  report      -- writes reports/<ts>/lm_eval/
  expected, checkpoint_expected -- render the shipped configs' expected values from measured runs
  measure     -- the full measurement run behind those values
  lm_eval_cli -- lm-eval's own command line with `moe-emu` registered

Config validation (config, schemes, task_names) imports neither torch nor
lm-eval, so `moe-harness eval --dry-run` stays fast.
"""
