"""`moe-harness bench ...`: one module per benchmark, JSON to stdout and reports/."""
