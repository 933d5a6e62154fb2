"""Adapters for shipped implementations, each a zero-argument factory that
returns an Implementation or raises Unavailable(reason). They import the
installed package; no upstream code is copied. Declared as entry points in
pyproject.toml ([project.entry-points."moe_harness.implementations"])."""
