"""The reference against itself (through the whole machinery) is 100%, and the
harness's Triton kernels (interpreter on CPU) match it 100%."""
import torch

import harness.formats as hf
from harness.conformance import run_conformance
from harness.conformance.adapters.reference import reference


def _all_match(data):
    assert not data["failed"]
    for c in data["cells"]:
        for stage, s in c["stages"].items():
            assert s["status"] == "ok", (c["format"], stage, s)
            assert s["matched"] == s["compared"] > 0, (c["format"], c["scale_mode"], stage)


def test_reference_against_itself_is_exact():
    impl = reference()
    impl.roundings = ("rne",)  # `moe-harness conform` runs both; one keeps this test short
    # float16 has the fewest scale thresholds (its exponent range is small);
    # float32's 2^-149..2^127 thresholds on two formats. The CLI runs them all.
    data = run_conformance([impl], dtypes=(torch.float16,), random_blocks=16)
    _all_match(data)
    # every format, every MX mode, both nvfp4 global scales
    assert {c["format"] for c in data["cells"]} == set(hf.FORMAT_NAMES)
    assert len(data["cells"]) == len(hf.MX_FORMAT_NAMES) * len(hf.SCALE_MODES) + 2
    _all_match(run_conformance([impl], formats=["mxfp4", "nvfp4"], dtypes=(torch.float32,), random_blocks=16))


def test_harness_triton_matches_reference_exactly():
    from harness.conformance.adapters.harness_triton import harness_triton

    impl = harness_triton()
    impl.max_elements = 4096  # the interpreter is slow; a seeded sample of each cell
    data = run_conformance([impl], formats=["mxfp4", "nvfp4"], dtypes=(torch.bfloat16,), random_blocks=16)
    _all_match(data)
