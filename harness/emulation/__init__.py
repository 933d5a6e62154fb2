"""Floor 6: a transformers model with its MoE blocks emulated: block swap per
family (families.py: one row per transformers model_type), the certified oracle, multi-GPU placement and its memory model, layers
built from checkpoints."""
