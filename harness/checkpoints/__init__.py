"""Checkpoints: synthetic real-size MoE checkpoints in producer formats.

  shapes            -- real model shapes (HF configs) and their sizes on paper
  synthetic         -- `moe-harness checkpoint synth`: random weights, streamed shard by shard
  synthetic_loader  -- loads such a checkpoint into moe-emu, each layer on its device
  synth_command     -- `moe-harness checkpoint synth`
"""
