"""Data package: the bundled tiny Qwen3-MoE (config, safetensors, tokenizer);
an __init__ so setuptools ships these files as package data."""
