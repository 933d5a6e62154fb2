"""GPU tuning and profiling scripts, run from a checkout (`python -m tools.NAME`);
not part of the installed `harness` package."""
