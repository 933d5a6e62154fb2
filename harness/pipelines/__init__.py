"""Buildkite pipelines: schema validation, harness lints, a local runner (docs/pipelines.md).

Imports nothing of harness.formats / kernels / moe / lmeval: pipeline steps only shell out
(`pipeline generate` alone reads the scheme table, harness/moe/schemes.py, to write nightly.yml).
"""
