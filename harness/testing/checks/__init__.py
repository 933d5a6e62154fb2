"""Generic MoE property checks, one module per bug class, shared by the
property suites (suites/properties/test_moe_*.py) and the regression tests
(suites/regressions/), which inject a historical bug and assert that the SAME
check detects it. problem.py holds the shared setup (problem -> truth ->
checkpoint -> config -> layer) and the reference trace; the tolerance model is
harness/moe/tolerance.py, the one `moe-harness run` uses."""
