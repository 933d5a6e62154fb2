"""Floor 6: a transformers model with its MoE blocks emulated: block swap per
family, the certified oracle, multi-GPU placement and its memory model, layers
built from checkpoints."""
