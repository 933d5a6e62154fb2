"""Real checkpoint formats: makers (with the producer libraries) and readers.

Modules (one job each):
  errors       -- CheckpointFormatError: one line naming file, tensor and expectation
  producers    -- the producer table: producer x scheme -> format, harness scheme, maker
  source       -- the bundled tiny MoE as producers see it, its hash, calibration text
  cache        -- where made checkpoints are kept ($MOE_HARNESS_CACHE_DIR): manifests,
                  atomic versions, verification, reader locks
  make         -- `make_checkpoint(producer, scheme)`: run a maker, cache its folder
  make_*       -- one maker per producer library (llmcompressor, quark, modelopt, gpt-oss)
  float_experts -- the float model's expert tensors (per-expert or a family's fused layout) for the makers
  files        -- safetensors + config reading (through the index; a tensor in two files
                  refused), expert tensor grouping
  completeness -- every MoE layer x expert x projection x part against config.json
  values       -- scale values checked on load (NaN, negative, zero, non-finite refused)
  detect       -- which producer format a folder holds (from its quantization config)
  read_*       -- one reader per format: producer tensors -> harness loader input
  load         -- folder -> {MoE block: MoEQuantConfig} through harness.moe.loaders
  producer_dequant -- each producer's own dequantization (for the round-trip proof)
  roundtrip    -- harness dequantization vs the producer's, per tensor
  command      -- `moe-harness checkpoint make | check | list | synth`
  shapes       -- real model shapes (HF configs) and their sizes on paper
  synthetic    -- synthetic real-size checkpoints (compressed-tensors layout), streamed shard by shard
  synthetic_loader -- a compressed-tensors checkpoint straight into moe-emu, each layer on its device
  synth_command -- `moe-harness checkpoint synth`

Producer libraries are imported inside the makers and producer_dequant only.
"""
