"""vLLM #42120 -> #46254 (seed 001): the base TritonExperts.apply started
quantizing its inputs (expects_unquantized_inputs) while the NVFP4 emulation
subclass still quantized before calling super().apply(): activations were
QDQ'd twice and MI300 lm-eval dropped. Generic checks: exactly one activation
QDQ per GEMM input per forward (check_single_quantization).

Measured while writing this test: the float64 reference comparison does NOT
reliably see an NVFP4 double QDQ. NVFP4 QDQ is idempotent except for blocks
whose scale gs*amax/6 falls in a narrow E4M3-subnormal window (about
1.5 * 2^-9): 14 of 4096 blocks with block magnitudes spread over 2^-30..2^2,
0 on calibrated random activations; and the tokens small enough to land there
then have their a2 block scales underflow to 0, which masks the difference.
So counting calls is THE detector for this class (as for OCP MX, where QDQ is
exactly idempotent), and the suites count calls on every drawn problem."""
import harness.moe.experts as ex

from harness.testing.checks.double_qdq import check_single_quantization
from harness.testing.checks.oracle import check_matches_reference

from suites.regressions.inject import detects, problem


def _double_quantizing_apply(self, hidden, topk_weights, topk_ids, *, activation="silu"):
    # The historical subclass: quantize, then call the base apply, which quantizes again.
    x = self.quantize_activation(hidden.float(), self.a1_input_scale()).to(hidden.dtype)
    return ex.ExpertsBase.apply(self, x, topk_weights, topk_ids, activation=activation)


def test_nvfp4_quantizes_once_and_matches_reference():
    p = problem("nvfp4")
    check_single_quantization(p)
    check_matches_reference(p)


def test_injected_double_quantization_is_detected(monkeypatch):
    monkeypatch.setattr(ex.NvFp4EmulationExperts, "apply", _double_quantizing_apply)
    p = problem("nvfp4")
    msg = detects(check_single_quantization, p, match="expected 2 activation QDQ calls")
    assert "got 3" in msg


def test_injected_double_quantization_on_two_grids_is_detected_numerically(monkeypatch):
    # The variant that moves numbers: the subclass QDQs with one global scale and
    # the base class QDQs again with another (here 3x: a different calibration).
    def apply_two_grids(self, hidden, topk_weights, topk_ids, *, activation="silu"):
        x = self.quantize_activation(hidden.float(), self.a1_input_scale() * 3).to(hidden.dtype)
        return ex.ExpertsBase.apply(self, x, topk_weights, topk_ids, activation=activation)

    monkeypatch.setattr(ex.NvFp4EmulationExperts, "apply", apply_two_grids)
    p = problem("nvfp4", T=32)
    detects(check_single_quantization, p, match="expected 2 activation QDQ calls")
    detects(check_matches_reference, p, match="outside tolerance")
