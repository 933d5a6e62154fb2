"""Experts classes, shaped like vLLM's TritonExperts and its emulation subclasses.

Data flow of ExpertsBase.apply (P = T * top_k token/expert pairs, p = t*k + j):

    x  = hidden.float()                          [T, H]
    x  = QDQ_a1(x)          (only if expects_unquantized_inputs; see below)
    h1 = grouped GEMM: x[pair token] @ W13[e].T  [P, 2I]   float32 accumulation
    h1 = h1 + w13_bias[e]                        (expert_bias rows; after the GEMM's full scaling)
    a  = activation(h1)                          [P, I]
    a  = QDQ_a2(a)                               one call over all pairs
    h2 = grouped GEMM: a @ W2[e].T               [P, H]
    h2 = h2 + w2_bias[e]                         (expert_bias rows)
    out[t] = sum_j topk_weights[t, j] * h2[t*k + j]  -> hidden.dtype

A fused layer running bf16 operands hands the GEMMs bf16 tensors: a bf16
hidden as it is (weight-only), silu's output rounded in its own pass (no
QDQ after it), an MX QDQ computed in bf16, nvfp4's QDQ written as
bf16(x_qdq * gs_a) (the GEMM applies 1 / gs_a after its dot): the bits the
GEMMs would round a float32 operand to, without the conversion passes.

Biases are float32 rows added on the host side around both backends' GEMMs:
the GEMM result (unfused: x @ dequant(W).T; fused: the kernel's output, its
post-scaling for two-level weights included) is the fully scaled product, so
the bias is never multiplied by a weight or activation scale.

Contracts (each one an upstream bug class, see docs/upstream-bugs.md):
- expects_unquantized_inputs = True: the BASE apply() quantizes a1; emulation
  subclasses must NOT quantize before calling super().apply() (double QDQ).
  When False the caller (FusedMoE's prepare step) has quantized a1 already.
- Every QDQ goes through `quantize_input.moe_kernel_quantize_input`, looked up
  on the module at call time: exactly one call per GEMM input, zero calls for
  weight-only schemes.
- The scale passed is chosen by `is None`, never by tensor truthiness
  (`a or b` on tensors forces a host sync and breaks graph capture).
- The constructor never writes into the shared quant config.
- keep_codes=False (fused backend only): once the kernel weights are built the
  experts hold `quant_config.without_codes()`, a new config without the
  unpacked codes and block scales, so nothing here keeps them alive; readers
  of the codes raise CodesReleasedError (config.py). The unfused backend
  reads the codes on every forward: keep_codes=False there is a ValueError.
- No host sync in apply(): fixed-shape loop over experts with masks (unfused)
  or a fixed-grid Triton kernel (fused).
"""
from __future__ import annotations

from typing import Optional

import torch

from harness.moe import combine, ops, quantize_input
from harness.moe.activations import get_activation
from harness.moe.config import MoEQuantConfig, require_codes
from harness.kernels import fused_gemm  # Triton only needed for this backend
from harness.kernels import fused_act  # bitwise the torch op, one pass
from harness.moe.schemes import BF16
from harness.schemes import EXPERT_BACKENDS

BACKENDS = EXPERT_BACKENDS


def _add_bias(h: torch.Tensor, bias: Optional[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """h [P, N] float32 plus each pair's expert bias row (bias [E, N] float32)."""
    if bias is None:
        return h
    return h + bias.index_select(0, ids)


def _grouped_gemm_unfused(x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [P, K] float32, ids [P] int64, w [E, N, K] float32 -> [P, N].
    Dense over experts (every expert's GEMM on all pairs, masked select): fixed
    shapes, no data-dependent control flow. torch.matmul in float32 (TF32 off
    is the caller's/torch default for fp32 matmul)."""
    out = x.new_zeros(x.shape[0], w.shape[1])
    for e in range(w.shape[0]):
        y = torch.matmul(x, w[e].transpose(0, 1))
        out = torch.where((ids == e).unsqueeze(1), y, out)
    return out


def check_hidden(where: str, hidden: torch.Tensor, hidden_size: int) -> None:
    """hidden is a float tensor [T, H] of the layer's H (a shape check: no host sync)."""
    if hidden.dim() != 2 or hidden.shape[1] != hidden_size or not hidden.dtype.is_floating_point:
        raise ValueError(f"{where}: hidden must be a float tensor [T, H={hidden_size}], got {hidden.dtype} "
                         f"{list(hidden.shape)}")


def check_apply_inputs(hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, num_experts: int,
                       hidden_size: int) -> None:
    """apply()'s inputs are what its kernels index by: hidden [T, H] float, topk_weights [T, k] float and
    topk_ids [T, k] integer on hidden's device, every id in [0, E). An id outside it is no error to the
    kernels: the unfused GEMM matches no expert and drops the pair, the pair layout places it past the last
    expert and the fused GEMM reads weights that are not there (NaN or another tensor's bytes). The shapes
    cost nothing to check. The ids' values: by `torch._assert_async`, no host sync (the CPU raises its
    message at once; CUDA fails the stream with a device-side assert); not while a CUDA graph is captured,
    where the graph would replay the check's five small launches every time (the layer's own routing, over router
    logits whose width FusedMoE.forward checks, gives ids in range by construction)."""
    check_hidden("experts.apply", hidden, hidden_size)
    T = hidden.shape[0]
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_ids.shape[1] < 1:
        raise ValueError(f"experts.apply: topk_ids must be [T={T}, k], got {list(topk_ids.shape)}")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex or topk_ids.dtype == torch.bool:
        raise ValueError(f"experts.apply: topk_ids must hold integer expert ids, got {topk_ids.dtype}")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape) or not topk_weights.dtype.is_floating_point:
        raise ValueError(f"experts.apply: topk_weights must be a float tensor of topk_ids' shape "
                         f"{list(topk_ids.shape)}, got {topk_weights.dtype} {list(topk_weights.shape)}")
    for name, t in (("topk_weights", topk_weights), ("topk_ids", topk_ids)):
        if t.device != hidden.device:
            raise ValueError(f"experts.apply: {name} is on {t.device}, hidden on {hidden.device}")
    # (dynamo cannot trace the capture query: a compiled forward keeps the check, which it can trace)
    if topk_ids.is_cuda and not torch.compiler.is_compiling() and torch.cuda.is_current_stream_capturing():
        return
    torch._assert_async(((topk_ids >= 0) & (topk_ids < num_experts)).all(),
                        f"experts.apply: topk_ids hold an expert id outside [0, {num_experts})")


def _f32(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.detach().to(torch.float32)


class ExpertsBase(torch.nn.Module):
    """Analogue of TritonExperts. Subclasses choose how weights are stored;
    apply() is the one place activations are quantized."""

    expects_unquantized_inputs: bool = True
    w13_bias: Optional[torch.Tensor] = None  # [E, 2I] float32, from the config (or UnquantizedExperts' arguments)
    w2_bias: Optional[torch.Tensor] = None  # [E, H]

    def __init__(self, quant_config: Optional[MoEQuantConfig], *, backend: str = "unfused",
                 op_backend: str = "auto", fused_precision: str = "auto", fused_mode: str = "auto",
                 kernel_weights=None, keep_codes: bool = True):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"unknown experts backend {backend!r}; expected one of {', '.join(BACKENDS)}")
        if not keep_codes and backend != "fused":
            raise ValueError(f"keep_codes=False needs backend='fused': the {backend} backend dequantizes the "
                             "expert weight codes on every forward, so it must keep them")
        self.keep_codes = bool(keep_codes)
        self.quant_config = quant_config  # shared: read only
        self.backend = backend
        self.op_backend = op_backend
        self.fused_precision = fused_precision
        self.fused_mode = fused_mode
        if quant_config is not None:
            self.scheme = quant_config.scheme
            self.a1_scale = quant_config.a1_scale
            self.a1_gscale = quant_config.a1_gscale
            self.a2_scale = quant_config.a2_scale
            self.a2_gscale = quant_config.a2_gscale
            self.w13_bias = _f32(quant_config.w13_bias)
            self.w2_bias = _f32(quant_config.w2_bias)
            ops.prepare_device(quant_config.device)
        self._kernel_weights = kernel_weights
        # Debug seam: when a dict, apply() stores its intermediates there
        # (a1, h1, a2_in, a2, h2); None in normal use (no cost, capture-safe).
        self.trace = None
        if backend == "fused" and kernel_weights is None:
            self._kernel_weights = self._make_kernel_weights()
        if not keep_codes and quant_config is not None:
            # the kernel weights are all the fused path reads: hold a config without the codes
            self.quant_config = quant_config.without_codes()

    # -- what subclasses provide -------------------------------------------------
    @property
    def num_experts(self) -> int:
        return self.quant_config.num_experts

    @property
    def hidden_size(self) -> int:
        return self.quant_config.hidden_size

    @property
    def quant_dtype(self):
        return self.scheme.quant_dtype

    @property
    def scale_mode(self) -> str:
        return self.scheme.scale_mode

    def dequantize_weights(self):
        """(W13 [E, 2I, H], W2 [E, H, I]) float32 for the unfused path."""
        qc = self.quant_config
        require_codes(qc, "the unfused experts path (dequantize_weights)")
        return (ops.dequantize_expert_weights(qc.w13_q, qc.w13_gscale, backend=self.op_backend),
                ops.dequantize_expert_weights(qc.w2_q, qc.w2_gscale, backend=self.op_backend))

    def _make_kernel_weights(self):
        qc = self.quant_config
        require_codes(qc, "building the fused kernel weights")
        return (fused_gemm.FusedWeights.from_quantized(qc.w13_q, qc.w13_gscale),
                fused_gemm.FusedWeights.from_quantized(qc.w2_q, qc.w2_gscale))

    # -- scale selection: by `is None`, never `a or b` on tensors ---------------
    def a1_input_scale(self):
        return self.a1_scale if self.a1_scale is not None else self.a1_gscale

    def a2_input_scale(self):
        return self.a2_scale if self.a2_scale is not None else self.a2_gscale

    def quantize_activation(self, x: torch.Tensor, scale, bf16_operand: bool = False) -> torch.Tensor:
        if self.quant_dtype is None:  # weight-only / unquantized: zero QDQ calls
            return x
        xq, _ = quantize_input.moe_kernel_quantize_input(
            x, scale, self.quant_dtype, scale_mode=self.scale_mode, quantization_emulation=True,
            backend=self.op_backend, bf16_operand=bf16_operand)
        return xq

    def _gemm(self, x, ids, which: int, w_unfused, layout=None, x_row_div: int = 1, bias=None, row_scale=None,
              x_scaled: bool = False, act=None, act_dtype=torch.float32):
        """The expert GEMM `which` (0: w13, 1: w2) of the pairs, + bias[ids]
        where given; row_scale (fused only: the kernel's epilogue or the
        same torch multiply) times each pair's row. x_scaled (fused only):
        x is the QDQ's bf16 output with the global scale put back. act
        (fused only): the activation of GEMM1's gate and up, applied by the
        GEMM's launches (moe_gemm's act), its result in act_dtype."""
        if self.backend == "fused":
            a_gscale = None
            if self.scheme.two_level:
                a_gscale = self.a1_input_scale() if which == 0 else self.a2_input_scale()
            return fused_gemm.moe_gemm(x, ids, self._kernel_weights[which], precision=self._precision(x.device),
                                       a_gscale=a_gscale, mode=self.fused_mode, layout=layout, x_row_div=x_row_div,
                                       bias=bias, row_scale=row_scale, x_scaled=x_scaled, act=act,
                                       act_dtype=act_dtype)
        if row_scale is not None or act is not None:
            raise ValueError("row_scale and act are the fused backend's epilogue")
        if x_row_div != 1:
            x = x.repeat_interleave(x_row_div, dim=0)
        return _add_bias(_grouped_gemm_unfused(x, ids, w_unfused[which]), bias, ids)

    def _precision(self, device) -> str:
        return fused_gemm.resolve_precision(self.fused_precision, self.scheme, device)

    def apply(self, hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, *,
              activation: str = "silu") -> torch.Tensor:
        act = get_activation(activation)
        check_apply_inputs(hidden, topk_weights, topk_ids, self.num_experts, self.hidden_size)
        T, H = hidden.shape
        k = topk_ids.shape[1]
        # bf16 hand-offs: where the GEMMs take bf16 operands (fused, precision "bf16") they get bf16 tensors
        # (the bits they round to), sparing a conversion pass each: a bf16 hidden as it is (weight-only); silu's
        # output in bf16 only without an activation QDQ, which reads the float32 values; each block-format
        # QDQ written as the GEMM's operand in its own pass (bf16_operand): MX, the float32 QDQ rounded once to
        # nearest even, as the GEMM would round it; nvfp4, bf16(x_qdq * gs_a), the GEMM applying 1 / gs_a after
        # its dot (x_scaled). The QDQ reads a bf16 hidden as it is. With the debug trace on, the float32
        # intermediates are kept as they are
        fused_bf16 = self.backend == "fused" and self.trace is None and self._precision(hidden.device) == "bf16"
        # the key's kind only where it decides something (the dispatcher is the one place an unknown key fails)
        kind = quantize_input.quant_kind(self.quant_dtype) if fused_bf16 else None
        bf16_gemms = fused_bf16 and not self.scheme.two_level
        operand = fused_bf16 and kind in ("mx", "two_level")  # a2's QDQ, and a1's where apply() runs it
        operand1 = operand and self.expects_unquantized_inputs
        scaled, scaled1 = (operand and kind == "two_level"), (operand1 and kind == "two_level")
        handoff = bf16_gemms and self.quant_dtype is None
        a1_bf16 = (bf16_gemms and kind in ("none", "mx")) or operand1
        x = hidden if a1_bf16 and hidden.dtype == torch.bfloat16 else hidden.to(torch.float32)
        if self.expects_unquantized_inputs:
            x = self.quantize_activation(x, self.a1_input_scale(), bf16_operand=operand1)
        w = self.dequantize_weights() if self.backend == "unfused" else None
        ids = topk_ids.reshape(-1).to(torch.int64)
        layout = None
        if self.backend == "fused":  # one expert-sorted layout for both GEMMs

            layout = fused_gemm.pair_layout(ids, self._kernel_weights[0].E)
        # the activation: in GEMM1's launches on the GPU (fused, no trace: the trace keeps h1), the bits of the
        # one-pass kernel (fused_act) on h1, itself the bits of the torch ops; else that kernel or the torch ops
        g_dtype = torch.bfloat16 if handoff else torch.float32
        in_gemm1 = (self.backend == "fused" and self.trace is None and activation in fused_act.ACTIVATIONS
                    and hidden.is_cuda)
        h1 = self._gemm(x, ids, 0, w, layout, x_row_div=k, bias=self.w13_bias, x_scaled=scaled1,  # pair p: p // k
                        act=activation if in_gemm1 else None, act_dtype=g_dtype)
        if in_gemm1:
            g = h1
        elif self.backend == "fused" and activation in fused_act.ACTIVATIONS and h1.is_cuda:
            g = fused_act.ACTIVATIONS[activation](h1, g_dtype)
        else:
            g = act(h1)
        a = self.quantize_activation(g, self.a2_input_scale(), bf16_operand=operand)
        # the router weights: in GEMM2's epilogue (fused, no trace: the trace keeps h2 as it is), else the
        # same float32 multiply here; either way the slot-order top-k sum of the products (harness.moe.combine)
        tw = topk_weights.to(torch.float32)
        in_gemm = self.backend == "fused" and self.trace is None
        h2 = self._gemm(a, ids, 1, w, layout, bias=self.w2_bias, row_scale=tw.reshape(-1) if in_gemm else None,
                        x_scaled=scaled)
        if self.trace is not None:
            self.trace.update(a1=x, h1=h1, a2_in=g, a2=a, h2=h2)
        if in_gemm and h2.is_cuda and hidden.dtype in fused_act.SUM_DTYPES:  # the same bits in one pass
            return fused_act.topk_sum(h2, k, hidden.dtype)
        hw = h2.reshape(T, k, H) if in_gemm else h2.reshape(T, k, H) * tw.unsqueeze(-1)
        return combine.topk_sum(hw, hidden.dtype)


class NvFp4EmulationExperts(ExpertsBase):
    """NVFP4 weights (e2m1 codes, E4M3 block scales, per-expert global scale),
    NVFP4 activations with the encode-side a1_gscale / a2_gscale."""

    expects_unquantized_inputs = True

    def __init__(self, quant_config, **kw):
        if not quant_config.scheme.two_level:
            raise ValueError(f"NvFp4EmulationExperts needs a two-level (nvfp4-style) scheme, got "
                             f"{quant_config.scheme.name}")
        super().__init__(quant_config, **kw)

    def apply(self, hidden, topk_weights, topk_ids, *, activation="silu"):
        # Activation QDQ is done ONCE, in ExpertsBase.apply (expects_unquantized_inputs).
        return super().apply(hidden, topk_weights, topk_ids, activation=activation)


class OcpMxEmulationExperts(ExpertsBase):
    """OCP MX weights (E8M0 block scales) with MX or per-tensor fp8 activations."""

    expects_unquantized_inputs = True

    def __init__(self, quant_config, **kw):
        s = quant_config.scheme
        if s.two_level or s.weight_only:
            raise ValueError(f"OcpMxEmulationExperts needs an OCP MX w+a scheme, got {s.name}")
        super().__init__(quant_config, **kw)

    def apply(self, hidden, topk_weights, topk_ids, *, activation="silu"):
        # Activation QDQ is done ONCE, in ExpertsBase.apply (expects_unquantized_inputs).
        return super().apply(hidden, topk_weights, topk_ids, activation=activation)


class Mxfp8WeightOnlyExperts(ExpertsBase):
    """MXFP8 (E4M3) weights, unquantized activations: zero activation QDQ calls."""

    expects_unquantized_inputs = True

    def __init__(self, quant_config, **kw):
        if not quant_config.scheme.weight_only:
            raise ValueError(f"Mxfp8WeightOnlyExperts needs a weight-only scheme, got {quant_config.scheme.name}")
        super().__init__(quant_config, **kw)


class UnquantizedExperts(ExpertsBase):
    """The "bf16" baseline: float weights as given (computed in float32), no QDQ."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor, *, backend: str = "unfused",
                 w13_bias: Optional[torch.Tensor] = None, w2_bias: Optional[torch.Tensor] = None, **kw):
        self._w13, self._w2 = w13, w2
        self.scheme = BF16
        super().__init__(None, backend=backend, **kw)
        if (w13_bias is None) != (w2_bias is None):
            raise ValueError("w13_bias and w2_bias come together; got only one")
        self.w13_bias, self.w2_bias = _f32(w13_bias), _f32(w2_bias)

    @property
    def num_experts(self) -> int:
        return self._w13.shape[0]

    @property
    def hidden_size(self) -> int:
        return self._w13.shape[2]

    def dequantize_weights(self):
        return self._w13.to(torch.float32), self._w2.to(torch.float32)

    def _make_kernel_weights(self):
        return fused_gemm.FusedWeights.from_float(self._w13), fused_gemm.FusedWeights.from_float(self._w2)

    def a1_input_scale(self):
        return None

    def a2_input_scale(self):
        return None


def make_experts(quant_config: MoEQuantConfig, backend: str = "unfused", **kw) -> ExpertsBase:
    s = quant_config.scheme
    if s.two_level:
        cls = NvFp4EmulationExperts
    elif s.weight_only:
        cls = Mxfp8WeightOnlyExperts
    else:
        cls = OcpMxEmulationExperts
    return cls(quant_config, backend=backend, **kw)
