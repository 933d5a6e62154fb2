"""Floor 4: what the suites, `moe-harness run` and other projects share to test
MoE layers: the bug-class checks (`harness.testing.checks`)."""
