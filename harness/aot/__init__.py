"""Floor 4: the ahead-of-time compile tool: every Triton kernel and launch the
project defines, compiled for gfx942, gfx950, sm_90 and sm_100 without a GPU."""
