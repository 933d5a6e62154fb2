"""Prove the property suites can fail: apply one historical-style fault at a
time to a scratch copy of the repo, run the named tests there, and report
which went red. A fault that leaves every test green is a hole in the suite.

    python -m suites.fault_injection            # all faults, table to stdout
    python -m suites.fault_injection --json out.json
    python -m suites.fault_injection --render-docs   # rewrite the table in docs/fault-injection.md

Each fault is (file, exact old text, new text, tests expected to catch it).
suites/test_fault_injection.py checks in every `make test` that each pattern
occurs exactly once and each named test exists, and shows a few cheap faults
red; suites/test_fault_table_doc.py checks that docs/fault-injection.md holds
render_table() of this list; the full sweep is a nightly Buildkite step
(harness/pipelines/nightly.py).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
P = "suites/properties/"
# The launch snapshot: every launch choice of the fused GEMM (suites/targets/launch_grid.py).
LS = "suites/targets/test_launch_selection.py::test_every_launch_choice_matches_the_snapshot"

FAULTS = [
    ("rne ties rounded away", "harness/formats/minifloat.py",
     "up = (frac > 0.5) | ((frac == 0.5) & odd)", "up = frac >= 0.5",
     [P + "test_formats_special.py::test_fp4_tie_tables", P + "test_formats_elements.py"]),
    ("nibbles swapped in pack_fp4", "harness/formats/packing.py",
     "return (lo | (hi << 4)).contiguous()", "return (hi | (lo << 4)).contiguous()",
     [P + "test_formats_packing.py"]),
    ("floor scale via float32 log2", "harness/formats/scales.py",
     'if code == SCALE_FLOOR:\n        return _fp32_exponent(amax) - el.emax',
     'if code == SCALE_FLOOR:\n        return torch.floor(torch.log2(amax)).to(torch.int32) - el.emax',
     [P + "test_formats_special.py::test_floor_uses_exponent_bits_not_float32_log2", P + "test_formats_oracles.py"]),
    ("signed zero dropped", "harness/formats/minifloat.py",
     "negative = v.view(torch.int32) < 0", "negative = v < 0",
     [P + "test_formats_special.py::test_signed_zero_kept", P + "test_formats_qdq.py::test_sign_symmetry"]),
    ("nvfp4 dequant (e2m1*s)/gs", "harness/formats/quant.py",
     "    out = vals * _block_multipliers(spec, byte, gs, codes.shape[:-1]).unsqueeze(-1)",
     "    out = vals * _block_multipliers(spec, byte, gs, codes.shape[:-1]).unsqueeze(-1)\n    if not spec.is_mx:\n        out = (vals * scales.block_scale_decode(spec, byte).unsqueeze(-1)) / (gs.reshape(-1, 1, 1) if gs.dim() else gs)",
     [P + "test_formats_special.py::test_nvfp4_operation_order", P + "test_formats_oracles.py::test_matches_vllm_nvfp4_emulation"]),
    ("E8M0 byte not clamped below 0 (wraps)", "harness/formats/scales.py",
     "byte = torch.clamp(shared + E8M0_BIAS, 0, E8M0_MAX_BYTE)", "byte = torch.clamp(shared + E8M0_BIAS, -255, E8M0_MAX_BYTE)",
     [P + "test_formats_special.py::test_scale_byte_clamped_to_0_254"]),
    ("Inf saturates instead of poisoning the MX block", "harness/formats/quant.py",
     "torch.where(nonfinite, torch.inf, amax)", "torch.nan_to_num(torch.where(nonfinite, torch.inf, amax), nan=float('nan'), posinf=3e38)",
     [P + "test_formats_special.py::test_nan_or_inf_gives_nan_scale_and_nan_block", P + "test_formats_qdq.py::test_nan_or_inf_poisons_only_its_block"]),
    ("even mode computed as floor", "harness/formats/scales.py",
     "bits = amax.view(torch.int32) + (1 << (22 - el.mbits))", "bits = amax.view(torch.int32)",
     [P + "test_formats_special.py::test_even_mode_increments_at_mantissa_threshold", P + "test_formats_oracles.py::test_matches_torchao_bitwise"]),
    ("no saturation at max_normal", "harness/formats/minifloat.py",
     "mag = torch.where(a >= spec.max_normal, spec.max_code, mag)", "mag = mag",
     [P + "test_formats_elements.py", P + "test_formats_qdq.py::test_error_within_half_a_code_step"]),
    ("away rounding as float32 floor(q + 0.5)", "harness/formats/minifloat.py",
     '    elif rounding == "away":\n        up = frac >= 0.5',
     '    elif rounding == "away":\n        return torch.floor(q + 0.5)',
     [P + "test_formats_special.py::test_element_rounding_is_exact_near_half_of_smallest_code"]),
    ("nvfp4 scale 1/6 as exact division", "harness/formats/quant.py",
     "gs * (amax * spec.inv_elem_max)", "(gs * amax) / spec.elem_max",
     [P + "test_formats_special.py::test_nvfp4_block_scale_formula", P + "test_formats_oracles.py::test_matches_vllm_nvfp4_emulation"]),
    ("rceil: >= instead of > on the fraction", "harness/formats/scales.py",
     "(frac_a > frac_m)", "(frac_a >= frac_m)",
     [P + "test_formats_oracles.py::test_matches_torchao_bitwise", P + "test_formats_qdq.py::test_scale_mode_relations"]),
]

# Faults in the Triton kernels (harness/kernels), caught by the interpreter-run
# zero-tolerance tests on CPU.
K = "harness/kernels/triton_src.py"
KT = [P + "test_kernels.py"]
FAULTS += [
    ("kernel: RNE ties rounded away", K, "    if AWAY:\n        # A tie", "    if True:\n        # A tie", KT),
    ("kernel: packed nibbles swapped", K, "c_lo | (c_hi << 4), scodes, HALF", "c_hi | (c_lo << 4), scodes, HALF", KT),
    ("kernel: prefetched tile never handed over", K, "            w = w_next\n", "            w = w\n", KT),
    ("kernel: prefetch reads the current tile again", K, "w_next = _load_rows(w_ptr, (blk0 + BPP) * HALF",
     "w_next = _load_rows(w_ptr, blk0 * HALF", KT),
    ("kernel: dequantize reads the wrong nibble", K, "lo = _decode(b & 0xF,", "lo = _decode(b >> 4,", KT),
    ("kernel: ceil scale +1 for exact powers of two", K,
     "shared = e - F32_BIAS - EMAX + ((amax_bits & F32_FRAC_MASK) != 0).to(tl.int32)", "shared = e - F32_BIAS - EMAX + 1", KT),
    ("kernel: signed zero dropped", K, "return values, mag | ((xb >> (32 - WIDTH)) & SIGN_BIT)",
     "return values, mag | tl.where(mag != 0, (xb >> (32 - WIDTH)) & SIGN_BIT, 0)", KT),
    ("kernel: nvfp4 E4M3 block scale ties away", K, "s, s_mag = _round_to_grid(sfb, S_MBITS, S_EMIN_FIELD, False)",
     "s, s_mag = _round_to_grid(sfb, S_MBITS, S_EMIN_FIELD, True)", KT),
    ("kernel: MX NaN block element code not set", K, "        mag = tl.where(d, NAN_CODE, mag)\n", "        mag = mag\n", KT),
    ("kernel: rceil >= instead of >", K, "((amax_bits & F32_FRAC_MASK) > RCEIL_MANT)", "((amax_bits & F32_FRAC_MASK) >= RCEIL_MANT)", KT),
    ("kernel: even-mode half-ulp one bit too low", "harness/kernels/constants.py",
     '"EVEN_ADD": 1 << (F32_MANT_BITS - 1 - el.mbits)', '"EVEN_ADD": 1 << (F32_MANT_BITS - 2 - el.mbits)', KT),
    ("fused MoE GEMM: unmasked loads on tiles that do not divide N, K", "harness/kernels/launch_config.py",
     '        even_nk = n % cfg["BLOCK_N"] == 0 and k % cfg["BLOCK_K"] == 0',
     '        even_nk = not dequant or (n % cfg["BLOCK_N"] == 0 and k % cfg["BLOCK_K"] == 0)',
     [P + "test_moe_layer_smoke.py::test_fused_gemm_tiles_that_do_not_divide", LS]),
    ("fused MoE GEMM1 reads pair rows of the token matrix (x_row_div ignored)", "harness/kernels/fused_gemm_src.py",
     "a = tl.load(x_ptr + x_rows[:, None] * stride_xm", "a = tl.load(x_ptr + rows_safe[:, None] * stride_xm",
     [P + "test_moe_layer_smoke.py::test_fused_gemm1_reads_token_rows"]),
]

# Storage dtypes and bad input: reference and kernels share
# harness/formats/storage.py and validate.py.
ST = P + "test_formats_storage.py"
KB = P + "test_kernels.py::test_dequantize_bad_input_same_on_reference_and_kernels"
FAULTS += [
    ("storage: float8 scales/codes read by value", "harness/formats/storage.py",
     "        return t.view(torch.uint8)", "        return t.to(torch.uint8)",
     [ST + "::test_issue_11_repro", ST + "::test_kernels_read_storage_bit_for_bit", ST + "::test_ocp_mx_loader_reads_storage"]),
    ("storage: any 1-byte dtype accepted (wrong float8 kind)", "harness/formats/storage.py",
     "    if t.dtype in accepted:", "    if t.element_size() == 1:", [ST + "::test_refused_scale_dtypes"]),
    ("storage: QuantizedTensor keeps float8 fields", "harness/formats/quant.py",
     "        self.codes = code_bytes(self.codes, self.fmt)\n        self.scales = scale_bytes(self.scales, self.fmt)",
     "        pass", [ST + "::test_qdq_error_bound_and_moe_weight_paths_read_storage"]),
    ("bad input: kernel dequantize skips the shared checks", "harness/kernels/api.py",
     "    codes, scales, gs = dequantize_inputs(q.codes, q.scales, q.global_scale, spec)",
     "    codes, scales, gs = q.codes, q.scales, (q.global_scale if not spec.is_mx else None)", [KB]),
    ("bad input: code range never checked", "harness/formats/validate.py",
     "    if packed or width >= 8 or", "    if True or", [KB, ST + "::test_loaders_refuse_out_of_range_codes"]),
    ("bad input: reference decode reads high code bits", "harness/formats/minifloat.py",
     "    if spec.width < 8:\n        codes = codes & ((1 << spec.width) - 1)\n", "",
     [P + "test_kernels.py::test_without_value_reads_reference_and_kernels_give_the_same_bits"]),
    ("bad input: dequantize does not check the global scale value", "harness/formats/validate.py",
     "    gs = as_global_scale(global_scale, codes.device, read_values=read_values)",
     "    gs = as_global_scale(global_scale, codes.device, read_values=False)", [KB]),
    ("bad input: global scale shape not checked", "harness/formats/validate.py",
     "any(g not in (1, n) for g, n in zip(aligned, lead))", "False", [KB]),
    ("bad input: codes and scales on different devices accepted", "harness/formats/validate.py",
     "    check_same_device(spec, codes=codes, scales=scales)\n", "", [KB]),
    ("bad input: global scale of any type", "harness/formats/global_scale.py",
     "    if isinstance(value, torch.Tensor):\n        if value.dtype == torch.bool",
     "    return\n    if isinstance(value, torch.Tensor):\n        if value.dtype == torch.bool",
     [KB, P + "test_kernels.py::test_quantize_bad_global_scale_same_on_reference_and_kernels"]),
    ("capture safety: hot-path dequantize reads values", "harness/formats/quant.py",
     "dequantize_inputs(q.codes, q.scales, q.global_scale, q.fmt, read_values=False)",
     "dequantize_inputs(q.codes, q.scales, q.global_scale, q.fmt, read_values=None)",
     [P + "test_moe_structure.py::test_no_host_work_in_forward", P + "test_kernels.py::test_value_checks_read_no_device_tensor"]),
]


# Faults in `moe-harness conform` (harness/conformance): the verdict, the exact
# spec, the comparison and the shrinker, caught by the planted-bug suite.
C = "suites/conformance/"
CT = [C + "test_planted_bugs.py", C + "test_exact_and_plugin.py"]
FAULTS += [
    ("conform: verdict blames the reference", "harness/conformance/verdict.py",
     "    if impl_bad and not ref_bad:\n        v = IMPL_WRONG", "    if impl_bad and not ref_bad:\n        v = REF_WRONG", CT),
    ("conform: exact ties go to the odd code", "harness/conformance/exact.py",
     "mag = lo if lo % 2 == 0 else hi", "mag = lo if lo % 2 == 1 else hi", CT),
    ("conform: codes stage compares the implementation with itself", "harness/conformance/compare.py",
     "        return a, b, a == b, compared", "        return a, b, a == a, compared", CT),
    ("conform: shrinker keeps nothing", "harness/conformance/shrink.py",
     "                if fails(cand):\n                    cur = cand", "                if False:\n                    cur = cand", CT),
    ("conform: registry ignores the implementation name", "harness/conformance/divergences.py",
     "        if impl_name != self.implementation or case.stage not in self.stages:",
     "        if case.stage not in self.stages:", [C + "test_registry_and_protocol.py"]),
]

# The one-row promise: a two-level row's rule reads the row, in the
# reference and in the kernels; an unknown scale-mode code is a compile error.
SR = P + "test_synthetic_rows.py"
FAULTS += [
    ("two-level rule with NVFP4's element max (reference)", "harness/formats/quant.py",
     "torch.clamp(xb * r, -spec.elem_max, spec.elem_max)", "torch.clamp(xb * r, -6.0, 6.0)",
     [SR + "::test_two_level_rule_reads_the_row_hand_computed"]),
    ("kernel: two-level block scale from NVFP4's fl(1/6)", "harness/kernels/constants.py",
     'consts["INV_ELEM_MAX"] = spec.inv_elem_max', 'consts["INV_ELEM_MAX"] = f32(1.0 / 6.0)',
     [SR + "::test_kernels_match_reference"]),
    ("kernel: an unknown scale mode falls into rceil", K,
     "elif SCALE_MODE == SCALE_RCEIL:", "elif True:", [P + "test_kernel_scale_modes.py"]),
]

# Compiled as models run them: `moe-harness targets` compiles each
# launch with its integers unspecialised and as multiples of 16, and ROCm's
# bf16 float-weight GEMM takes tiles that fit gfx942 in the second.
TT = "suites/targets/test_targets.py::"
FAULTS += [
    ("targets: integers compiled unspecialised only", "harness/aot/compile.py",
     'if t.startswith("*") or (ints == "div16" and _is_int(t))}', 'if t.startswith("*")}',
     [TT + "test_launches_with_integer_arguments_compile_in_both_specialisations",
      TT + "test_an_overflow_only_aligned_sizes_reach_fails_gfx942"]),
    ("ROCm bf16 float-weight GEMM keeps the H200 tiles", "harness/kernels/launch_config.py",
     '"bf16, float weights": ("ROCM_BF16_FLOAT_CONFIGS", "GPU_CONFIGS"),',
     '"bf16, float weights": ("GPU_CONFIGS",),',
     [TT + "test_rocm_takes_the_lds_safe_tiles", TT + "test_an_overflow_only_aligned_sizes_reach_fails_gfx942", LS]),
    ("CPU dry runs not skipped where a GPU is visible", "conftest.py",
     "    if cpu_only and kind is not None:", "    if False:",
     ["suites/test_markers.py::test_cpu_only_skips_where_a_gpu_is_visible"]),
]

# The floors of docs/design.md: an upward import (the MoE layer importing a
# command) and a circle of two modules inside a package.
AR = "suites/test_architecture.py::"
FAULTS += [
    ("floors: the MoE layer imports a command", "harness/moe/routing.py",
     "\nimport torch\n", "\nimport torch\n\nimport harness.commands.run  # noqa: F401\n",
     [AR + "test_floors_contract"]),
    ("modules in a circle: lmeval.config imports checkpoint_config", "harness/lmeval/config.py",
     "\nfrom harness.lmeval import task_data, task_names\n",
     "\nfrom harness.lmeval import task_data, task_names\nimport harness.lmeval.checkpoint_config  # noqa: F401\n",
     [AR + "test_no_module_imports_itself_through_others"]),
]

# Nothing wrong passes: checkpoint shards, index, completeness and scale
# values; the verified checkpoint cache; conform's isolation and comparison rules.
CK = "suites/checkpoints/"
SH = CK + "test_shards_and_completeness.py::"
VC = CK + "test_value_checks.py::"
CA = CK + "test_cache.py::"
IS = C + "test_isolation.py::"
CR = C + "test_comparison_rules.py::"
FAULTS += [
    ("checkpoints: the last file wins for a tensor in two files", "harness/checkpoints/files.py",
     "                if len(fs) > 1:\n                    raise CheckpointFormatError(fs[0], k,",
     "                if False:\n                    raise CheckpointFormatError(fs[0], k,",
     [SH + "test_a_stale_shard_shadowing_a_tensor_is_refused"]),
    ("checkpoints: the index is ignored", "harness/checkpoints/files.py",
     "wm = _index_map(self.folder, set(by_name))", "wm = None",
     [SH + "test_with_an_index_every_tensor_comes_from_the_file_it_names",
      SH + "test_a_file_the_index_does_not_name_is_refused"]),
    ("checkpoints: experts not checked complete against config.json", "harness/checkpoints/load.py",
     "    r.complete(ckpt, blocks, scheme)\n", "",
     [SH + "test_the_last_expert_missing_is_refused", SH + "test_a_whole_layers_experts_missing_is_refused"]),
    ("checkpoints: E4M3 NaN block scale accepted", "harness/checkpoints/values.py",
     '[("NaN", (b & 0x7F) == E4M3.nan_code), ("negative", (b & 0x80) != 0)]', '[("negative", (b & 0x80) != 0)]',
     [VC + "test_e4m3_nan_block_scale_is_refused"]),
    ("checkpoints: negative E4M3 block scales accepted", "harness/checkpoints/values.py",
     '[("NaN", (b & 0x7F) == E4M3.nan_code), ("negative", (b & 0x80) != 0)]', '[("NaN", (b & 0x7F) == E4M3.nan_code)]',
     [VC + "test_negative_e4m3_block_scales_are_refused"]),
    ("checkpoints: a zero or negative per-tensor scale accepted", "harness/checkpoints/values.py",
     "bad = ~(torch.isfinite(v) & (v > 0))", "bad = ~torch.isfinite(v)",
     [VC + "test_modelopt_input_scale_must_be_finite_and_positive",
      VC + "test_compressed_tensors_global_scales_must_be_finite_and_positive"]),
    ("cache: an entry trusted on its link, not verified", "harness/checkpoints/cache.py",
     "            try:\n                verify(version)", "            try:\n                pass",
     [CA + "test_a_truncated_cached_safetensors_is_not_returned", CA + "test_an_empty_made_json_is_not_trusted"]),
    ("cache: --force deletes a version being read", "harness/checkpoints/cache.py",
     "                except BlockingIOError:\n                    in_use.append(p)\n                    continue",
     "                except BlockingIOError:\n                    pass",
     [CA + "test_force_never_deletes_a_version_being_read"]),
    ("conform: implementations handed the shared input (no copy)", "harness/conformance/compare.py",
     "copies = [t.to(device, copy=True) for t in tensors]", "copies = [t.to(device) for t in tensors]",
     [IS + "test_an_input_mutation_is_flagged_and_does_not_hide_the_next_bug"]),
    ("conform: implementations run in the run's own process", "harness/conformance/runner.py",
     "        if isolate:\n", "        if False:\n",
     [IS + "test_sys_exit_0_is_a_fail_not_a_green_run"]),
    ("conform: the per-cell time limit never fires", "harness/conformance/isolation.py",
     "if current is not None and now - cell_t0 > limits.cell_timeout_s:", "if False:",
     [IS + "test_hostile_implementations_each_fail_alone"]),
    ("conform: -0 equals +0", "harness/conformance/compare.py",
     "return (a.view(_INT_VIEW[a.dtype]) == b.view(_INT_VIEW[b.dtype])) | (torch.isnan(a) & torch.isnan(b))",
     "return (a == b) | (torch.isnan(a) & torch.isnan(b))",
     [CR + "test_values_equal_is_bitwise_and_nan_equals_only_nan", CR + "test_an_implementation_dropping_the_sign_of_zero_fails"]),
    ("conform: NaN equals any value", "harness/conformance/compare.py",
     "return (a.view(_INT_VIEW[a.dtype]) == b.view(_INT_VIEW[b.dtype])) | (torch.isnan(a) & torch.isnan(b))",
     "return (a.view(_INT_VIEW[a.dtype]) == b.view(_INT_VIEW[b.dtype])) | torch.isnan(a) | torch.isnan(b)",
     [CR + "test_values_equal_is_bitwise_and_nan_equals_only_nan",
      CR + "test_an_implementation_with_another_nan_payload_passes_and_nan_for_a_number_fails"]),
]

# Interruption: every long command stops its children (SIGTERM, grace,
# SIGKILL), removes its temporaries and marks its report.
FAULTS += [
    ("make: the maker outlives an interrupted make", "harness/util/interrupt.py",
     "        if proc is not None:\n            terminate_group(proc.pid, grace_s)\n            proc.wait()\n        raise",
     "        raise",
     [CK + "test_interrupt.py::test_make_force_interrupted"]),
    ("make: a signal while the maker starts leaks it", "harness/util/interrupt.py",
     "        with deferred():\n            proc = subprocess.Popen(", "        if True:\n            proc = subprocess.Popen(",
     [CK + "test_interrupt.py::test_a_signal_while_the_maker_starts_still_stops_it"]),
    ("synth: the temporary folder kept when interrupted", "harness/checkpoints/synthetic.py",
     "        if out.exists():\n            shutil.rmtree(out, ignore_errors=True)\n    return dict(summary",
     "        pass\n    return dict(summary",
     [CK + "test_interrupt.py::test_synth_interrupted"]),
    ("conform: an interrupted run leaves the implementation running", "harness/conformance/isolation.py",
     "            if code is None:\n                code = _stop(proc, limits.grace_s)",
     "            if code is None:\n                code = 0",
     [IS + "test_conform_interrupted_writes_the_report_of_what_finished"]),
    ("pipeline run: jobs get SIGKILL at once, no SIGTERM and grace", "harness/pipelines/runner.py",
     "os.killpg(p.pid, signal.SIGTERM)", "os.killpg(p.pid, signal.SIGKILL)",
     ["suites/pipelines/test_runner.py::test_an_interrupted_run_gives_its_jobs_sigterm_and_the_grace_period"]),
    ("eval: an interrupted run leaves its report unmarked", "harness/commands/convention.py",
     '            self.meta["interrupted"] = stop is not None', '            self.meta["interrupted"] = False',
     ["suites/lm_eval/test_eval_interrupt.py::test_eval_interrupted"]),
]


# The MoE families' features (harness/moe/arch.py): each bug class a refactor of
# them could ship, caught by its check in harness/testing/checks/ on a fixed
# family problem (suites/regressions/test_family_*.py).
R = "suites/regressions/"
FAULTS += [
    ("routing: correction bias in the routing weights", "harness/moe/routing.py",
     "    scores = _scores(logits, arch.scoring)\n",
     "    scores = _scores(logits, arch.scoring) + (0 if e_score_correction_bias is None "
     "else e_score_correction_bias.to(logits))\n",
     [R + "test_family_correction_bias_in_weights.py::test_weights_are_the_unbiased_scores"]),
    ("routing: group limit skipped", "harness/moe/routing.py",
     "    if arch.grouped:\n        keys = torch.where(group_mask(keys, arch)",
     "    if False:\n        keys = torch.where(group_mask(keys, arch)",
     [R + "test_family_group_limit_skipped.py::test_selection_stays_in_the_kept_groups"]),
    ("layer: routed scaling applied twice", "harness/moe/layer.py",
     "        out = self.experts.apply(x, topk_weights, topk_ids, activation=arch.activation)\n",
     "        out = self.experts.apply(x, topk_weights, topk_ids, activation=arch.activation) * arch.routed_scaling_factor\n",
     [R + "test_family_routed_scaling.py::test_scaling_once_on_the_routed_output"]),
    ("layer: routed scaling applied to the shared experts", "harness/moe/layer.py",
     "            out = out + self.shared_experts.apply(",
     "            out = out + arch.routed_scaling_factor * self.shared_experts.apply(",
     [R + "test_family_routed_scaling.py::test_scaling_once_on_the_routed_output"]),
    ("layer: router weight on both the input and the output", "harness/moe/layer.py",
     "            topk_weights = torch.ones_like(topk_weights)\n", "            pass\n",
     [R + "test_family_router_weight_on_input.py::test_weight_on_the_input_only"]),
    ("experts: bias added before the dequantized GEMM's scale", "harness/moe/experts.py",
     "self._gemm(x, ids, 0, w, layout, x_row_div=k, bias=self.w13_bias, x_scaled=scaled1,",
     "self._gemm(x, ids, 0, w, layout, x_row_div=k, bias=self.w13_bias if self.w13_bias is None "
     "or self.quant_config is None or self.quant_config.w13_gscale is None "
     "else self.w13_bias / self.quant_config.w13_gscale.reshape(-1, 1), x_scaled=scaled1,",
     [R + "test_family_bias_after_scale.py::test_bias_after_the_scale"]),
    ("experts: activation format taken from the weight row", "harness/moe/experts.py",
     "    def quant_dtype(self):\n        return self.scheme.quant_dtype",
     "    def quant_dtype(self):\n        return self.scheme.weight_fmt",
     [R + "test_family_activation_format_from_weights.py::test_activations_in_the_rows_format"]),
]


# conform --moe (harness/conformance/moe): each bug-class check run against
# a black-box MoE implementation, shown red by the planted seed-class layers
# and the test-local broken layers of suites/conformance.
MC = "harness/conformance/moe/checks.py"
MP = "suites/conformance/test_moe_planted.py::test_planted_layer_failed_by_its_check"
MT = "suites/conformance/test_moe_protocol.py::test_equivariance_oracle_and_offsets_fail_on_broken_layers"
FAULTS += [
    ("moe conform: double_qdq accepts extra QDQ calls", MC,
     "    if got != want:\n        raise CheckFailed(f\"{len(shapes)} activation QDQ",
     "    if len(got) < len(want):\n        raise CheckFailed(f\"{len(shapes)} activation QDQ", [MP]),
    ("moe conform: scale_use probes only the weight global scales", MC,
     'return [("a1_gscale", 3.0), ("a2_gscale", 3.0), ("w13_gscale", 2.0), ("w2_gscale", 2.0)]',
     'return [("w13_gscale", 2.0), ("w2_gscale", 2.0)]', [MP]),
    ("moe conform: silent_skip compares with the quantizing reference", MC,
     "    err0 = (out.detach().cpu().double() - tr0.out).abs()", "    err0 = (out.detach().cpu().double() - want).abs()",
     [MP]),
    ("moe conform: device check catches KeyError, not AttributeError", MC,
     "    except AttributeError as e:\n        raise CheckFailed(f\"build read an attribute",
     "    except KeyError as e:\n        raise CheckFailed(f\"build read an attribute", [MP]),
    ("moe conform: capture check without the host-work proxy", MC,
     "        with torch.no_grad(), no_host_work():\n            fwd(h, lg)",
     "        with torch.no_grad():\n            fwd(h, lg)", [MP]),
    ("moe conform: ModelOpt weight_scale_2 written encode-side", "harness/conformance/moe/weights.py",
     'd["w13_weight_scale_2"], d["w2_weight_scale_2"] = _recip(truth.w13_gscale), _recip(truth.w2_gscale)',
     'd["w13_weight_scale_2"], d["w2_weight_scale_2"] = truth.w13_gscale, truth.w2_gscale',
     [MP, "suites/conformance/test_moe_harness_layers.py::test_unfused_layer_passes_every_check_on_every_scheme"]),
    ("moe conform: shared_weights builds each layer from a copy", MC,
     "        return ctx.build(shared)  # every layer from the very same tensors",
     "        return ctx.build({k: v.clone() for k, v in shared.items()})", [MP]),
    ("moe conform: ties family without tie activations", "harness/conformance/moe/problems.py",
     'Family("ties", "ties", 0, 2, "ties"),', 'Family("ties", "ties", 0, 2, "random"),', [MP]),
    ("moe conform: shrinking never reaches one token", "harness/conformance/moe/problems.py",
     "    for T in (1, p.T // 2, p.T - 1):\n        if 1 <= T < p.T:",
     "    for T in (1, p.T // 2, p.T - 1):\n        if 1 < T < p.T:", [MP]),
    ("moe conform: oracle compares the first token only", MC,
     '    r = outside(out, ctx.inst.trace().out, ctx.tolerance(), "output vs the float64 reference")',
     '    r = outside(out[:1], ctx.inst.trace().out[:1], ctx.tolerance()[:1], "output vs the float64 reference")',
     [MT]),
    ("moe conform: equivariance with a relative tolerance of 1", MC,
     "    outside(outp, out[perm].cpu().double(), 2 * tol[pc],",
     "    outside(outp, out[perm].cpu().double(), 2 * tol[pc] + out[perm].cpu().double().abs(),", [MT]),
    ("moe conform: offsets probe failure taken for an error", MC,
     "    except AssertionError as e:\n        raise CheckFailed(f\"expert weights past 2^31 bytes",
     "    except NotImplementedError as e:\n        raise CheckFailed(f\"expert weights past 2^31 bytes", [MT]),
]

# A user's first config: vLLM configs run as vLLM means them or are
# refused in one line; the dry-run plan is the run's gate list; thresholds
# round outward; the plot survives an accuracy of 1.0.
FC = "suites/lm_eval/test_first_config.py::"
FAULTS += [
    ("eval: plot error bars not clamped at accuracy 1.0", "harness/lmeval/report.py",
     "return max(0.0, p - lo), max(0.0, hi - p)", "return p - lo, hi - p", [FC + "test_plot_survives_accuracy_one"]),
    ("eval: a float model with no scheme runs bf16 against bf16", "harness/lmeval/config.py",
     "    if model_dir is None or quantization_config(model_dir) is not None:\n        return FROM_CHECKPOINT",
     "    if True:\n        return FROM_CHECKPOINT",
     [FC + "test_every_vllm_config_on_a_float_model_without_scheme_is_refused"]),
    ("eval: an unknown top-level key is ignored", "harness/lmeval/config.py",
     'for key in sorted(set(data) - VLLM_KEYS - {"harness"}, key=str):',
     'for key in sorted(set(data) - VLLM_KEYS - {"harness"} - set(data), key=str):',
     [FC + "test_a_typo_in_a_top_level_key_is_an_error_with_the_nearest_key"]),
    ("eval: a hub id without a local copy is skipped, exit 0", "harness/lmeval/config.py",
     '"(--model-optional or harness.model_optional: true) to skip", optional)',
     '"(--model-optional or harness.model_optional: true) to skip", True)',
     [FC + "test_every_vllm_config_loads_and_absent_is_one_line_exit_2"]),
    ("eval: --scheme keeps another scheme's thresholds", "harness/lmeval/config.py",
     "if scheme is None or cfg.scheme is None or scheme == cfg.scheme or record_only:",
     "if scheme is None or cfg.scheme is None or scheme == cfg.scheme or record_only or True:",
     [FC + "test_scheme_override_against_another_schemes_thresholds_is_refused"]),
    ("eval plan: a lower-is-better bound printed with >=", "harness/lmeval/gate_plan.py",
     'return "<=" if lower_is_better(self.metric) else ">="', 'return ">="',
     [FC + "test_the_nvfp4_plan_states_what_the_run_gates"]),
    ("eval: the run's one-sided bound is not the plan's", "harness/lmeval/gates.py",
     "bound = one_sided_bound(value, rtol, metric)", "bound = value * (1 - rtol)",
     [FC + "test_plan_is_the_list_of_gates_the_run_evaluates"]),
    ("eval plan: kl_oracle left out", "harness/lmeval/gate_plan.py",
     'if cfg.kl.oracle and scheme != cfg.baseline_scheme and scheme != "bf16":', "if False:",
     [FC + "test_the_nvfp4_plan_states_what_the_run_gates"]),
    ("eval: a registry task without local data passes the dry run", "harness/lmeval/config.py",
     "        if missing:\n            more =", "        if False:\n            more =",
     [FC + "test_every_vllm_config_with_a_scheme_is_refused_for_missing_task_data"]),
    ("thresholds: rendered values rounded to nearest, not outward", "harness/lmeval/expected.py",
     "rounding=ROUND_CEILING if up else ROUND_FLOOR", 'rounding="ROUND_HALF_EVEN"',
     [FC + "test_rendered_thresholds_round_outward_on_the_boundary"]),
]


# One command-line convention: every subcommand takes --reports,
# -q, -v and lists the exit codes; a run writes the three files, moves
# `latest` and logs library noise; bad input is exit 2 with no folder.
CV = "suites/test_cli_convention.py::"
FAULTS += [
    ("cli: a subcommand without the common options", "harness/cli.py",
     "    for leaf in leaves:\n        convention.add_common(leaf)", "    for leaf in leaves[:0]:\n        convention.add_common(leaf)",
     [CV + "test_every_subcommand_takes_the_common_options_and_lists_the_exit_codes"]),
    ("convention: latest not moved", "harness/commands/convention.py",
     "            self._own_summary()\n            self.rd.update_latest()", "            self._own_summary()",
     [CV + "test_each_command_writes_the_three_files_moves_latest_and_logs_noise"]),
    ("convention: bad input leaves a report folder", "harness/commands/convention.py",
     "    if rc == 2 and not rep.rd._results:\n        rep.discard()", "    if False:\n        rep.discard()",
     [CV + "test_bad_input_is_one_line_exit_2_and_no_report"]),
    ("convention: library noise on the screen", "harness/commands/convention.py",
     "noise.to_log(self.log_path, enabled=not self.verbose)", "noise.to_log(self.log_path, enabled=False)",
     [CV + "test_library_noise_goes_to_third_party_log"]),
    ("checkpoint check: a missing folder is a finding (exit 1)", "harness/commands/checkpoint.py",
     '        _, fmt, _ = identify(folder)\n    except CheckpointFormatError as e:\n        return refuse("checkpoint check", e)',
     '        _, fmt, _ = identify(folder)\n    except CheckpointFormatError as e:\n'
     '        print(f"moe-harness checkpoint check: {e}", file=sys.stderr)\n        return 1',
     [CV + "test_bad_input_is_one_line_exit_2_and_no_report"]),
]

# conform's output: the verdict and the minimal block on the
# terminal and in the plugin's message, only matched registry entries,
# heatmap colour = verdict.
CO = "suites/conformance/test_conform_output.py::"
FAULTS += [
    ("conform: the terminal names the cell, not the verdict", "harness/commands/conform.py",
     "else conf_report.plain(conf_report.finding_line(c, stage, f)))", 'else f"{impl.name} {cell.label()} {stage}")',
     [CO + "test_terminal_names_the_verdict_and_the_minimal_block_of_each_failing_cell"]),
    ("conform summary: every registry entry listed", "harness/conformance/report.py",
     "              for e in matched] or", '              for e in data["registry"]] or',
     [CO + "test_summary_lists_only_the_registry_entries_this_run_matched"]),
    ("conform heatmap: an unexplained 99% cell drawn as explained", "harness/conformance/report.py",
     "    if err or u:\n        return \"unexplained\"", "    if err:\n        return \"unexplained\"",
     [CO + "test_heatmap_colour_is_the_verdict"]),
    ("conform plugin: the message prints the arrays", "harness/conformance/check.py",
     "else report.plain(report.finding_line(c, stage, f))))",
     "else f\"{f.get('impl')} {f.get('reference')}\"))",
     [CO + "test_plugin_message_is_the_verdict_and_the_minimal_block"]),
    ("conform plugin: the collector's token warning left on", "harness/conformance/pytest_plugin.py",
     "    config.pluginmanager.unregister(plugin)\n    del config._buildkite", "    return",
     [CO + "test_downstream_pytest_ends_without_the_collector_token_warning"]),
]


# Long work is never silent and plots keep their thresholds in view.
FAULTS += [
    ("eval progress: no line until a phase ends", "harness/lmeval/progress.py",
     "        if done < total and self.last is not None and now - self.last < self.every:\n            return",
     "        if done < total:\n            return",
     [FC + "test_progress_meter_prints_rate_and_eta_every_few_seconds"]),
    ("eval plot: the KL threshold above the bars cut off", "harness/lmeval/report.py",
     "    top = max(positive) * 3 if positive else 1.0",
     "    top = max(v for v in kls if v and v > 0) * 1.05 if positive else 1.0",
     [FC + "test_both_panels_draw_their_threshold_inside_the_axes"]),
    ("eval plot: the accuracy panel without its bound", "harness/lmeval/report.py",
     "            if b is not None:\n                ax.plot(", "            if False:\n                ax.plot(",
     [FC + "test_both_panels_draw_their_threshold_inside_the_axes"]),
    ("checkpoint make: silent while the producer runs", "harness/commands/checkpoint.py",
     "    beat.start()\n", "    pass\n", [CV + "test_checkpoint_make_is_not_silent_and_copies_to_out"]),
]


# conform isolation: the child is reaped once, also when it exits before the
# parent has read every cell it sent.
FAULTS += [
    ("conform isolation: the child's last cells dropped when it exits before they are read",
     "harness/conformance/isolation.py",
     "if proc.exitcode is not None and not recv.poll(0):", "if proc.exitcode is not None:",
     ["suites/conformance/test_isolation.py::test_a_child_that_exits_before_its_cells_are_read_is_reaped_once"]),
]

# The block swap of the transformers MoE families (harness/emulation/moe_swap.py
# reading the rows of families.py): each layout or routing fact misread,
# caught by the block-by-block comparison with the transformers block
# (harness/testing/checks/block_swap.py) on the tiny family models.
MS = "harness/emulation/moe_swap.py"
SW = ["suites/lm_eval/test_moe_swap.py::test_every_block_matches_transformers"]
FAULTS += [
    ("swap: gate and up de-interleaved the wrong way (gpt-oss)", MS,
     "idx = torch.cat([torch.arange(0, n, 2), torch.arange(1, n, 2)])",
     "idx = torch.cat([torch.arange(1, n, 2), torch.arange(0, n, 2)])", SW),
    ("swap: shared expert dropped (DeepSeek-V3, Llama4)", MS,
     'opts["shared_w13"], opts["shared_w2"] = _shared_weights(mlp, row, name)', "pass", SW),
    ("swap: router bias dropped (gpt-oss)", MS,
     "router_bias=_attr(router, row.router_bias, rname).detach() if row.router_bias else None",
     "router_bias=None", SW),
    ("swap: e_score_correction_bias dropped (DeepSeek-V3)", MS,
     'opts["e_score_correction_bias"] = _attr(router, row.correction_bias, rname).detach()', "pass", SW),
    ("swap: group limit ignored (DeepSeek-V3)", MS,
     '        opts["n_group"] = int(families.resolve(row.n_group, config, rname))\n'
     '        opts["topk_group"] = int(families.resolve(row.topk_group, config, rname))\n', "        pass\n", SW),
    ("swap: routed scaling factor dropped (DeepSeek-V3)", MS,
     'opts["routed_scaling_factor"] = float(families.resolve(row.routed_scaling_factor, config, rname))',
     "pass", SW),
    ("swap: routing weight on the output instead of the input (Llama4)", MS,
     'opts["router_weight_on_input"] = True', "pass", SW),
    ("swap: expert biases dropped (gpt-oss)", MS,
     '    if b13 is not None:\n        opts["w13_bias"] = b13\n    if b2 is not None:\n        opts["w2_bias"] = b2\n',
     "", SW),
]

# bench moe against its production peer: the same codes, the right row, the right target.
BP = "suites/properties/test_moe_bench_peer.py::"
FAULTS += [
    ("bench moe: the peer handed gate/up concatenated, not interleaved", "harness/commands/bench/moe_peer.py",
     'hf.pack_fp4(interleave_gate_up(q13.codes))', 'hf.pack_fp4(q13.codes)',
     [BP + "test_the_peer_gets_the_codes_the_harness_w4a16_row_runs"]),
    ("bench moe: a row held to the peer row of another T", "harness/commands/bench/moe.py",
     '"vs_peer": _ratio(best, peer_best.get(T)),', '"vs_peer": _ratio(best, peer_best.get(min(peer_best, default=T))),',
     [BP + "test_every_harness_row_is_held_to_the_peer_row_of_its_shape_and_t"]),
    ("bench moe: the W4A16 row given the activation-QDQ allowance", "harness/commands/bench/moe_peer.py",
     "limit = MAX_VS_PEER_W4A16 if get_scheme(scheme).weight_only else", "limit = MAX_VS_PEER_W4A16 if False else",
     [BP + "test_every_harness_row_is_held_to_the_peer_row_of_its_shape_and_t"]),
]

# conform on CUDA: an implementation that does not pickle is still isolated.
FAULTS += [
    ("conform: a CUDA run of a closure implementation runs in-process", "harness/conformance/isolation.py",
     '        if getattr(impl, "found_by", None):\n            return "spawn", ""',
     '        if False:\n            return "spawn", ""',
     ["suites/conformance/test_isolation.py::test_spawned_children_as_a_cuda_run_uses_them"]),
]


# The gsm8k stand-in (suites/lm_eval/tasks/tiny_add_gsm.yaml, eval --task-map):
# its strict filter must need the '####' line, and a vLLM config's gsm8k
# values must never gate the stand-in that runs in gsm8k's place.
SI = "suites/lm_eval/test_standin_task.py::"
FAULTS += [
    ("stand-in: strict-match takes any number, '####' not required", "suites/lm_eval/tasks/tiny_add_gsm.yaml",
     'regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"', 'regex_pattern: "(\\\\-?[0-9\\\\.\\\\,]+)"',
     [SI + "test_filters_extract_as_gsm8k"]),
    ("stand-in: --task-map keeps gsm8k's reference values as the stand-in's gates", "harness/lmeval/config.py",
     "[MetricSpec(m.name, None) for m in cfg.tasks[i].metrics]", "[MetricSpec(m.name, m.value) for m in cfg.tasks[i].metrics]",
     [SI + "test_mapped_values_are_recorded_not_gated"]),
]

# vLLM's configs on synthetic checkpoints: the nightly's commands, run at tiny size.
FAULTS += [
    ("nightly: a vLLM config step without the stand-in task map", "harness/pipelines/nightly.py",
     '--task-map {run.task_map} "', '"',
     ["suites/lm_eval/test_vllm_runs.py::test_the_nightly_commands_pass_at_the_tiny_shape_of_the_family"]),
]

# Checkpoint-built layers of the tiny gpt_oss family model (the gpt-oss MXFP4
# layout with per-expert biases): the biases read, de-interleaved, checked and
# required, each fault caught by the bit-for-bit comparison with the layer the
# harness builds directly or by a refusal test.
FC_GPT = CK + "test_family_checkpoints.py::"
RG = "harness/checkpoints/read_gptoss.py"
FAULTS += [
    ("checkpoint gpt-oss: expert biases not read", RG,
     '            out[f"{key}_bias"] = _bias(files, names[proj, "bias"], tuple(s.shape[:2]), interleaved=key == "w13")',
     "            pass", [FC_GPT + "test_checkpoint_layer_equals_the_direct_build_bit_for_bit"]),
    ("checkpoint gpt-oss: gate_up_proj_bias left interleaved", RG,
     "    return deinterleave(t) if interleaved else t", "    return t",
     [FC_GPT + "test_checkpoint_layer_equals_the_direct_build_bit_for_bit"]),
    ("checkpoint gpt-oss: bias shape unchecked", RG,
     "dtype=BIAS_DTYPES, shape=shape)", "dtype=BIAS_DTYPES)",
     [FC_GPT + "test_bad_biases_are_refused_by_the_reader"]),
    ("checkpoint gpt-oss: a non-finite bias accepted", "harness/checkpoints/values.py",
     "    bad = ~torch.isfinite(t)\n", "    bad = torch.zeros_like(t, dtype=torch.bool)\n",
     [FC_GPT + "test_bad_biases_are_refused_by_the_reader"]),
    ("checkpoint gpt-oss: one bias of a block without the other accepted", RG,
     "        if len(have) == 1:", "        if False:",
     [FC_GPT + "test_bad_biases_are_refused_by_the_reader"]),
    ("checkpoint blocks: a missing or extra expert bias not refused", "harness/emulation/checkpoint_blocks.py",
     "    if want == have:\n        return", "    if True:\n        return",
     [FC_GPT + "test_biases_missing_when_the_model_has_them_are_refused",
      FC_GPT + "test_biases_on_a_model_without_them_are_refused"]),
    ("loader: MX biases dropped by the conversion", "harness/moe/conversion.py",
     "MoEQuantConfig(s, q13, q2, w13_bias=bias(w13_bias), w2_bias=bias(w2_bias))", "MoEQuantConfig(s, q13, q2)",
     [FC_GPT + "test_checkpoint_layer_equals_the_direct_build_bit_for_bit"]),
]

# Checkpoint-built layers of the tiny DeepSeek-V3 (llmcompressor): the shared
# expert and the router's correction bias read from the checkpoint.
CB = "harness/emulation/checkpoint_blocks.py"
FAULTS += [
    ("checkpoint blocks: shared expert not built from the checkpoint", CB,
     'shared = (_shared_experts(files, fmt, scheme, row, spec, dev, backend, keep_codes)\n'
     '              if "shared_w13" in spec.options else None)',
     "shared = None", [FC_GPT + "test_checkpoint_layer_equals_the_direct_build_bit_for_bit"]),
    ("checkpoint blocks: correction bias taken from the float model", CB,
     'routing["e_score_correction_bias"] = _correction_bias(files, row, spec).to(dev)', "pass",
     [FC_GPT + "test_deepseek_correction_bias_is_the_checkpoints"]),
    ("checkpoint load: a shared expert's missing part not named", "harness/checkpoints/load.py",
     "            if part not in names.get(proj, {}):", "            if False:",
     [FC_GPT + "test_deepseek_bad_shared_expert_or_correction_bias_is_refused"]),
    ("checkpoint load: a non-finite correction bias accepted", "harness/checkpoints/load.py",
     "    bad = ~torch.isfinite(t)\n    if bool(bad.any()):\n        i = int(",
     "    bad = torch.zeros_like(t, dtype=torch.bool)\n    if bool(bad.any()):\n        i = int(",
     [FC_GPT + "test_deepseek_bad_shared_expert_or_correction_bias_is_refused"]),
    ("checkpoint blocks: w13 rows not checked against the model", CB,
     "    if got != want:\n        raise CheckpointFormatError(folder, what,", "    if False:\n        raise CheckpointFormatError(folder, what,",
     [FC_GPT + "test_deepseek_bad_shared_expert_or_correction_bias_is_refused"]),
]


# keep_codes=False: a fused layer releases its unpacked codes, freed, not moved; readers
# fail loudly; the eval drops them exactly when no certified oracle is asked; the memory
# model's term is what the layer holds.
KC = P + "test_moe_keep_codes.py::"
RB = "suites/multigpu/test_resident_bytes.py::test_resident_bytes_are_the_paper_figure"
FAULTS += [
    ("keep_codes=False: the layer keeps its codes anyway", "harness/moe/experts.py",
     "            self.quant_config = quant_config.without_codes()", "            self.quant_config = quant_config",
     [KC + "test_outputs_bit_identical_without_codes", KC + "test_codes_are_freed_not_moved", RB]),
    ("keep_codes=False: the codes moved to another attribute, not freed", "harness/moe/experts.py",
     "            self.quant_config = quant_config.without_codes()",
     "            self.quant_config, self._codes = quant_config.without_codes(), (quant_config.w13_q, quant_config.w2_q)",
     [KC + "test_codes_are_freed_not_moved", RB]),
    ("keep_codes=False accepted on the unfused backend", "harness/moe/experts.py",
     'if not keep_codes and backend != "fused":', "if False:",
     [KC + "test_unfused_refuses_keep_codes_false"]),
    ("the certified oracle built on a layer whose codes were released", "harness/emulation/moe_swap.py",
     '        require_codes(fused.quant_config, "the certified oracle (OracleMoE, the kl_oracle gate)")\n', "",
     [KC + "test_every_reader_of_released_codes_fails_clearly"]),
    ("keep_codes_for drops the codes although the oracle is asked", "harness/emulation/moe_swap.py",
     'return backend != "fused" or bool(oracle)', 'return backend != "fused"',
     [KC + "test_the_one_decision", "suites/multigpu/test_config.py::test_session_keeps_codes_iff_the_oracle_is_asked",
      "suites/multigpu/test_synthetic.py::test_moe_emu_drops_codes_iff_no_oracle"]),
    ("eval never tells the session that the kl_oracle gate is planned", "harness/lmeval/evaluate.py",
     'oracle=any(s.gate == "kl_oracle" for s in specs))', "oracle=False)",
     ["suites/multigpu/test_config.py::test_run_config_asks_for_the_oracle_iff_the_gate_is_planned"]),
    ("synthetic loader ignores keep_codes", "harness/emulation/synthetic_loader.py",
     "block = checkpoint_blocks.build_block(files, fmt, scheme, spec, tensors, device, backend, keep_codes=keep_codes)",
     "block = checkpoint_blocks.build_block(files, fmt, scheme, spec, tensors, device, backend)",
     ["suites/multigpu/test_synthetic.py::test_loader_keeps_codes_as_asked"]),
    ("memory model: the released codes still counted", "harness/models/shapes.py",
     "released = 0 if keep_codes else self.released_expert_bytes_per_layer(block, fp4=fp4, mma=mma)",
     "released = 0",
     [RB, "suites/multigpu/test_resident_bytes.py::test_released_term_on_paper"]),
    ("memory model: a non-fp4 kernel format's code tensor counted as released", "harness/models/shapes.py",
     "return (n if fp4 else 0) + self.reordered_scale_bytes_per_layer(block, fp4=fp4, mma=mma)\n",
     "return n + self.reordered_scale_bytes_per_layer(block, fp4=fp4, mma=mma)\n",
     [RB, "suites/multigpu/test_resident_bytes.py::test_released_term_on_paper"]),
]

# Synthetic checkpoints of DeepSeek-V3 (ModelOpt), Llama-4 (compressed-tensors) and gpt-oss,
# loaded without a float model (harness/emulation/synthetic_loader.py).
SF = "suites/multigpu/test_synthetic_families.py::"
FAULTS += [
    ("synth ModelOpt: weight_scale_2 written encode side", "harness/checkpoints/synthetic.py",
     'out[base + n + ".weight_scale_2"] = ws2.reshape(())', 'out[base + n + ".weight_scale_2"] = (1 / ws2).reshape(())',
     [SF + "test_loaded_experts_are_the_seeded_weights"]),
    ("synth gpt-oss: gate/up rows not interleaved", "harness/checkpoints/synthetic.py",
     'interleave_rows(stack["gate"][0], stack["up"][0])', 'torch.cat([stack["gate"][0], stack["up"][0]], 1)',
     [SF + "test_loaded_experts_are_the_seeded_weights"]),
    ("synth loader: router weight and bias not read from the checkpoint", "harness/emulation/synthetic_loader.py",
     '    for attr, tensor in (("weight", "router_weight"), (row.router_bias, "router_bias")):',
     '    for attr, tensor in ():', [SF + "test_loaded_layer_equals_the_checkpoint_blocks_build"]),
    ("completeness: Llama-4 moe_layers ignored", "harness/checkpoints/completeness.py",
     '    if "moe_layers" in config:', '    if False:', [SF + "test_llama4_moe_layers_are_read"]),
]

# The memory model of families with dense first layers (DeepSeek-V3).
FAULTS += [
    ("memory model: DeepSeek's dense first layers weighed as MoE layers", "harness/emulation/memory_model.py",
     "w = moe_dev.count(d) * layer_bytes + dense_dev.count(d) * dense_bytes", "w = layer_dev.count(d) * layer_bytes",
     ["suites/multigpu/test_bench.py::test_paper_weights_add_up_over_devices"]),
    ("placement: layers split by count, not by bytes", "harness/emulation/synthetic_loader.py",
     "where = balanced_layers(_layer_sizes(cfg), len(devices))",
     'where = balanced_layers([1] * cfg["num_hidden_layers"], len(devices))',
     ["suites/multigpu/test_bench.py::test_paper_weights_add_up_over_devices"]),
]


# What "auto" runs on a GPU (harness/kernels/precision.py).
FAULTS += [
    ("auto precision: W4A16 kept on float32 operands on a GPU", "harness/kernels/precision.py",
     'return "bf16" if scheme.two_level or scheme.act_block_fmt is not None or scheme.weight_only else "ieee"',
     'return "bf16" if scheme.two_level or scheme.act_block_fmt is not None else "ieee"',
     ["suites/properties/test_moe_layer_smoke.py::test_auto_precision_on_a_gpu_by_scheme_row"]),
    ("auto precision: fp8 per-tensor activations given lossy bf16 operands", "harness/kernels/precision.py",
     'return "bf16" if scheme.two_level or scheme.act_block_fmt is not None or scheme.weight_only else "ieee"',
     'return "bf16" if scheme.weight_fmt is not None else "ieee"',
     ["suites/properties/test_moe_layer_smoke.py::test_auto_precision_on_a_gpu_by_scheme_row"]),
]

# Kernel weights built from host codes a few experts at a time (checkpoint loads without codes).
KC = "suites/properties/test_moe_keep_codes.py::"
FAULTS += [
    ("lean build: every chunk written over the first experts", "harness/kernels/fused_weights.py",
     "getattr(full, name)[e0:e1].copy_(src)", "getattr(full, name)[:e1 - e0].copy_(src)",
     [KC + "test_kernel_weights_built_by_experts_are_bitwise_the_whole_build"]),
    ("lean config: its stand-ins say the codes were on the host", "harness/moe/config.py",
     'moved.update({n: dataclasses.replace(getattr(out, n), device=dev) for n in ("w13_q", "w2_q")})',
     "pass", [KC + "test_lean_config_moves_its_scales_and_says_where"]),
    ("lean load: the reader's codes unpacked on the layer's device", "harness/emulation/checkpoint_blocks.py",
     'return tensors if backend == "fused" and not keep_codes else _to(tensors, dev)', "return _to(tensors, dev)",
     ["suites/multigpu/test_synthetic_families.py::test_a_load_without_codes_builds_kernel_weights_from_host_codes"]),
    ("lean load: kernel weights built from the whole layer's codes at once", "harness/emulation/checkpoint_blocks.py",
     '    if backend != "fused" or keep_codes:\n        return make_experts(qc, backend=backend, keep_codes=keep_codes)',
     '    if True:\n        return make_experts(qc, backend=backend, keep_codes=keep_codes)',
     ["suites/multigpu/test_synthetic_families.py::test_a_load_without_codes_builds_kernel_weights_from_host_codes"]),
    ("lean config: the expert biases left behind", "harness/moe/config.py",
     "        return dataclasses.replace(out, **moved)",
     "        return dataclasses.replace(out, **dict(moved, w13_bias=None, w2_bias=None))",
     ["suites/multigpu/test_synthetic_families.py::test_a_load_without_codes_computes_what_a_load_with_them_does"]),
    ("gpt-oss: SwiGLU constants read from the config over the experts module", "harness/emulation/moe_swap.py",
     'got, where = getattr(experts, mod_attr, None), f"{name}.{row.experts}.{mod_attr}"',
     'got, where = getattr(cfg, cfg_attr, None), f"config.{cfg_attr}"',
     ["suites/lm_eval/test_moe_swap.py::test_gpt_oss_swiglu_constants_are_checked"]),
]

# The kernel format holds the checkpoint's scale bytes; the kernel decodes each block's multiplier.
FG = "suites/properties/test_kernels_fused_gemm.py::"
FAULTS += [
    ("fused kernel: E8M0 scale byte decoded one exponent off", "harness/kernels/fused_gemm_src.py",
     "    return _e8m0_value(sc)\n", "    return _e8m0_value(sc + 1)\n",
     [FG + "test_fused_dequantize_every_code_and_scale_byte"]),
    ("fused kernel: two-level multiplier s * fl(1/gs) instead of fl(s / gs)", "harness/kernels/fused_gemm_src.py",
     "        return tl.math.div_rn(s, gs_w)", "        return s * tl.math.div_rn(1.0, gs_w)",
     [FG + "test_fused_dequantize_every_code_and_scale_byte"]),
    ("fused kernel: two-level multiplier s without the global scale", "harness/kernels/fused_gemm_src.py",
     "    if KIND == 1 and TWO_LEVEL and not RAW_S:\n        gs_w = tl.load(wgs_ptr + e)",
     "    if False:\n        gs_w = tl.load(wgs_ptr + e)",
     [FG + "test_fused_dequantize_every_code_and_scale_byte"]),
    ("kernel format keeps its own copy of the scale bytes", "harness/kernels/fused_weights.py",
     "    if order == \"k\":\n        return scales.contiguous()\n",
     "    if order == \"k\":\n        return scales.clone()\n",
     ["suites/properties/test_moe_layer_smoke.py::test_fused_layer_holds_no_more_than_the_checkpoint",
      "suites/multigpu/test_resident_bytes.py::test_resident_bytes_are_the_paper_figure"]),
    ("kernel format: one global scale stretched over experts it does not cover", "harness/kernels/fused_weights.py",
     "            if gs.numel() == 1:\n", "            if gs.numel() < E:\n",
     ["suites/properties/test_moe_layer_smoke.py::test_fused_layer_holds_no_more_than_the_checkpoint"]),
]

FAULTS += [
    ("pair layout: one block fewer than its bound", "harness/kernels/moe_align.py",
     "    return m + (num_pairs - m) // block_m", "    return m + (num_pairs - m) // block_m - 1",
     ["suites/properties/test_kernels_moe_align.py::test_layout_places_every_pair_once_within_its_bound"]),
    ("pair layout: the padding lanes left in expert 0's count", "harness/kernels/moe_align_src.py",
     "    return tl.histogram(tl.where(pm, e, 0), E_PAD) - tl.where(ex == 0, n_pad, 0)",
     "    return tl.histogram(tl.where(pm, e, 0), E_PAD)",
     ["suites/properties/test_kernels_moe_align.py::test_align_equals_sort_pairs",
      "suites/properties/test_kernels_moe_align.py::test_align_edges"]),
    ("pair layout: each pair counted among its own earlier pairs", "harness/kernels/moe_align_src.py",
     "tl.maximum(offs[:, None] - tl.arange(0, W)[None, :] * 4, 0)",
     "tl.maximum(offs[:, None] + 1 - tl.arange(0, W)[None, :] * 4, 0)",
     ["suites/properties/test_kernels_moe_align.py::test_align_equals_sort_pairs"]),
    ("pair layout: experts equal but for a byte's top bit ranked as one", "harness/kernels/moe_align_src.py",
     "    nonzero = ((x & 0x7F7F7F7F) + 0x7F7F7F7F) | x", "    nonzero = (x & 0x7F7F7F7F) + 0x7F7F7F7F",
     ["suites/properties/test_kernels_moe_align.py::test_align_experts_that_share_byte_bits"]),
    ("pair layout: each expert starts after its own padded rows too", "harness/kernels/moe_align_src.py",
     "start = _cumsum(padded, 0) - padded", "start = _cumsum(padded, 0)",
     ["suites/properties/test_kernels_moe_align.py::test_align_equals_sort_pairs"]),
    ("pair layout (chunked): a chunk's padding lanes left in expert 0's count", "harness/kernels/moe_align_src.py",
     "CHUNK - tl.minimum(P - c * CHUNK, CHUNK)", "0",
     ["suites/properties/test_kernels_moe_align.py::test_chunked_equals_sort_pairs",
      "suites/properties/test_kernels_moe_align.py::test_chunked_edges"]),
    ("pair layout (chunked): each chunk's pairs start after their own chunk's too", "harness/kernels/moe_align_src.py",
     "carry[None, :] + _cumsum(tile, 0) - tile", "carry[None, :] + _cumsum(tile, 0)",
     ["suites/properties/test_kernels_moe_align.py::test_chunked_equals_sort_pairs",
      "suites/properties/test_kernels_moe_align.py::test_chunked_edges"]),
    ("pair layout (chunked): each expert starts after its own padded rows too", "harness/kernels/moe_align_src.py",
     "carry = _cumsum(padded, 0) - padded", "carry = _cumsum(padded, 0)",
     ["suites/properties/test_kernels_moe_align.py::test_chunked_equals_sort_pairs"]),
    ("pair layout (chunked): the start program's carry never advanced", "harness/kernels/moe_align_src.py",
     "        carry += _sum(tile, 0)", "        carry += _sum(tile, 0) * 0",
     ["suites/properties/test_kernels_moe_align.py::test_chunked_edges"]),
    ("pair layout (chunked): one row of each program's share not set to -1", "harness/kernels/moe_align_src.py",
     "tl.minimum(lo + FILL_ROWS, NROWS)", "tl.minimum(lo + FILL_ROWS - 1, NROWS)",
     ["suites/properties/test_kernels_moe_align.py::test_chunked_edges"]),
    ("pair layout: the chunked kernels left out past the one-program limit", "harness/kernels/pair_layout.py",
     "    elif moe_align.applies_chunked(ids.shape[0], num_experts):", "    elif False:",
     ["suites/properties/test_kernels_moe_align.py::test_pair_layout_picks_its_builder_by_size"]),
]

# Each block-format QDQ written as the bf16 GEMM's operand in one pass (bf16_operand): MX, the float32 QDQ
# rounded once; nvfp4, bf16(x_qdq * gs_a), which the GEMM takes as it is (x_scaled).
FAULTS += [
    ("qdq bf16_operand: nvfp4's global scale not put back", "harness/kernels/triton_src.py",
     "        v = v * gs\n", "        v = v\n",
     [P + "test_kernels.py::test_qdq_bf16_operand_is_the_ops"]),
    ("qdq bf16_operand: the output allocated in the input's dtype", "harness/kernels/launch.py",
     "y = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)",
     "y = torch.empty(x.shape, dtype=x.dtype, device=x.device)",
     [P + "test_kernels.py::test_qdq_bf16_operand_is_the_ops"]),
    ("qdq bf16_operand (torch path): nvfp4's QDQ rounded to the input dtype first", "harness/moe/ops.py",
     "(_torch_qdq(x.to(torch.float32), fmt, scale_mode, rounding, g) * g)",
     "(_torch_qdq(x, fmt, scale_mode, rounding, g) * g)",
     [P + "test_kernels.py::test_qdq_bf16_operand_is_the_ops"]),
    ("qdq bf16_operand (torch path): an MX QDQ rounded to the input dtype first", "harness/moe/ops.py",
     "_torch_qdq(x.to(torch.float32), fmt, scale_mode, rounding, None).to(torch.bfloat16)",
     "_torch_qdq(x, fmt, scale_mode, rounding, None).to(torch.bfloat16)",
     [P + "test_kernels.py::test_qdq_bf16_operand_is_the_ops"]),
    ("experts: nvfp4's scaled QDQ output handed to the GEMM as values (GPU)", "harness/moe/experts.py",
     "x_scaled=scaled1,  # pair p", "x_scaled=False,  # pair p",
     [P + "test_moe_gpu.py::test_bf16_handoffs_change_no_bit"]),
    ("fused GEMM: x_scaled taken without the post factor that undoes it", "harness/kernels/fused_gemm.py",
     "    if x_scaled and (not post or x.dtype != torch.bfloat16):", "    if False:",
     [P + "test_moe_layer_smoke.py::test_x_scaled_is_refused_without_the_post_factor_that_takes_it"]),
    ("fused GEMM: a scaled x scaled again (GPU)", "harness/kernels/fused_gemm.py",
     "        if not x_scaled:  # one pass", "        if True:  # one pass",
     [P + "test_moe_gpu.py::test_bf16_handoffs_change_no_bit"]),
    ("experts: a2's QDQ written as values, the GEMM told they are scaled (GPU)", "harness/moe/experts.py",
     "self.a2_input_scale(), bf16_operand=operand)", "self.a2_input_scale(), bf16_operand=False).to(torch.bfloat16)",
     [P + "test_moe_gpu.py::test_bf16_handoffs_change_no_bit"]),
]

# "large_n": the transposed product at BLOCK_M 64 and up on scale bytes in order "n" (launch_config.row_names).
FAULTS += [
    ("launch selection: the scale order never picks large_n", "harness/kernels/launch_config.py",
     'swap_n = bf16 and mma_order and scale_order == "n"', "swap_n = False",
     [P + "test_kernels_fused_gemm.py::test_n_order_scale_bytes_take_their_own_large_row"]),
    ("launch selection: BLOCK_M 32 never picks medium", "harness/kernels/launch_config.py",
     '    wide_k = bf16 and mma_order and k > 0 and', '    wide_k = False and mma_order and k > 0 and',
     [P + "test_kernels_fused_gemm.py::test_block_m_32_takes_medium_on_mma_words"]),
    ("launch selection: medium over a K not read to its BLOCK_K", "harness/kernels/launch_config.py",
     ' and k_read % GPU_CONFIGS["medium"].BLOCK_K == 0', "",
     [P + "test_kernels_fused_gemm.py::test_block_m_32_takes_medium_on_mma_words"]),
    ("launch selection: a long K loop never picks large_long_k", "harness/kernels/launch_config.py",
     "    long_k = bf16 and mma_order and k >= LONG_K_MIN", "    long_k = False and k >= LONG_K_MIN",
     [P + "test_kernels_fused_gemm.py::test_long_k_loops_take_their_own_large_row"]),
    ("fused GEMM: x's loads not masked on K under K_OVERREAD (the next row read past K)",
     "harness/kernels/fused_gemm_src.py",
     "                if EVEN_NK or (K_TAIL and part == 0):\n                    amask = rmask[:, None]",
     "                if W_FULL or (K_TAIL and part == 0):\n                    amask = rmask[:, None]",
     [P + "test_kernels_fused_gemm.py::test_k_overread_gemm_is_the_masked_gemm"]),
    ("fused weights: no slack after the scale bytes of rows read past K", "harness/kernels/fused_weights.py",
     "scales_k = _with_slack(scales_k, _slack(spec.block_size, N, over, _n_order(scales_k)))",
     "scales_k = _with_slack(scales_k, 0)",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack",
      P + "test_kernels_fused_gemm.py::test_k_overread_gemm_is_the_masked_gemm"]),
    ("fused weights: the slack after the tensors filled with 0xFF, not zero", "harness/kernels/fused_weights.py",
     "    t = torch.zeros(count + slack, dtype=like.dtype, device=like.device)[:count].view(dense)",
     "    t = torch.full((count + slack,), 255, dtype=like.dtype, device=like.device)[:count].view(dense)",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack",
      P + "test_kernels_fused_gemm.py::test_k_overread_gemm_is_the_masked_gemm"]),
    ("fused weights: the read past K not claimed", "harness/kernels/fused_weights.py",
     "        fw.k_over = over if fw.plain_scales else 0", "        fw.k_over = 0",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("fused weights: the read past K claimed over scales that are not plain (NaN past K)",
     "harness/kernels/fused_weights.py",
     "        fw.k_over = over if fw.plain_scales else 0", "        fw.k_over = over",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("fused weights: the slack of weights whose scales are not plain not counted", "harness/kernels/fused_weights.py",
     "        fw.k_slack = over\n", "        fw.k_slack = fw.k_over\n",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("fused weights: built a few experts at a time, the read past K not claimed", "harness/kernels/fused_weights.py",
     "        full.k_over = over if plain else 0\n", "",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("fused weights: a read past K beyond the storage not refused", "harness/kernels/fused_weights.py",
     "            if end > held:", "            if False:",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("fused weights: a read past K over experts that lie apart not refused", "harness/kernels/fused_weights.py",
     "            if any(d > 1 and st != w for d, st, w in zip(t.shape, t.stride(), want)):",
     "            if False:",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("fused GEMM: the launcher reads past K without checking the claim", "harness/kernels/fused_gemm.py",
     "    fw.check_over_read()  # a read past K only where the storage and the scales bear it\n", "",
     [P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("fused GEMM: the custom op drops the weights' read past K", "harness/kernels/fused_gemm.py",
     "    fw.k_over = k_over\n", "",
     [P + "test_kernels_fused_gemm.py::test_the_launcher_passes_the_read_k"]),
    ("fused GEMM: the launch selected without the read K", "harness/kernels/fused_gemm.py",
     "                        k_read=run_fw.k_read)", "                        k_read=None)",
     [P + "test_kernels_fused_gemm.py::test_the_launcher_passes_the_read_k"]),
    ("launch selection: K_OVERREAD where BLOCK_K does not divide the read K", "harness/kernels/launch_config.py",
     ' and k_read > k and k_read % cfg["BLOCK_K"] == 0)', " and k_read > k)",
     [P + "test_kernels_fused_gemm.py::test_k_overread_launches_mask_x_only"]),
    ("launch selection: a ragged long K never read past K", "harness/kernels/launch_config.py",
     '    if word_order == "mma" and k >= LONG_K_MIN and k % step:', '    if False:',
     [P + "test_kernels_fused_gemm.py::test_read_k_covers_ragged_long_k_loops_of_mma_words",
      P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("launch selection: a ragged long K read to the long-K row's BLOCK_K, not the decode row's",
     "harness/kernels/launch_config.py",
     '    step = GPU_CONFIGS["small"].BLOCK_K', '    step = GPU_CONFIGS["large_long_k"].BLOCK_K',
     [P + "test_kernels_fused_gemm.py::test_read_k_covers_ragged_long_k_loops_of_mma_words",
      P + "test_kernels_fused_gemm.py::test_overread_weights_hold_the_checkpoints_bytes_and_slack"]),
    ("memory model: the kernel format counted without rows read past K", "harness/models/shapes.py",
     "out.append((count, n, k, read_k(order, k)))", "out.append((count, n, k, k))",
     ["suites/multigpu/test_resident_bytes.py::test_read_past_k_kernel_format_on_paper"]),
    ("memory model: the codes' slack not counted", "harness/models/shapes.py",
     "codes = sum(count * n * k // 2 + (kr - k) // 2 for", "codes = sum(count * n * k // 2 + 0 * kr for",
     ["suites/multigpu/test_resident_bytes.py::test_read_past_k_kernel_format_on_paper"]),
    ("memory model: the scale bytes' slack in order \"n\" counted as order \"k\"'s", "harness/models/shapes.py",
     "total += (kr - k) // block * (n if n_order else 1)", "total += (kr - k) // block",
     ["suites/multigpu/test_resident_bytes.py::test_read_past_k_kernel_format_on_paper"]),
    ("compile registry: the launches on weights read past K left out", "harness/aot/fused_launches.py",
     'if fused.MMA_ORDER and plain and not ov.get("EVEN_NK"):', "if False:",
     [TT + "test_overread_weights_launches_are_registered"]),
    ("compile registry: launches read past K on scales that are not plain", "harness/aot/fused_launches.py",
     'if fused.MMA_ORDER and plain and not ov.get("EVEN_NK"):', 'if fused.MMA_ORDER and not ov.get("EVEN_NK"):',
     [TT + "test_overread_weights_launches_are_registered"]),
    ("launch selection: the transposed product at BLOCK_M 64 and up takes K_TAIL", "harness/kernels/launch_config.py",
     'tail = ("EVEN_NK" not in override and not dequant and not swapped_large',
     'tail = ("EVEN_NK" not in override and not dequant',
     [P + "test_kernels_fused_gemm.py::test_the_transposed_product_at_large_block_m_masks_every_block_k"]),
    ("fused GEMM: the launch selected without the weights' scale order", "harness/kernels/fused_gemm.py",
     'scale_order=run_fw.scale_order or "k",', "",
     [P + "test_kernels_fused_gemm.py::test_the_launcher_passes_the_weights_scale_order"]),
    ("compile registry: launches in order n compiled with the rows of order k", "harness/aot/fused_launches.py",
     'kw = dict(kw, scale_order="n" if order else "k")', 'kw = dict(kw, scale_order="k")',
     [TT + "test_code_launches_compile_in_both_scale_orders"]),
    ("fused GEMM: an empty K launched into the kernel that assumes a K step", "harness/kernels/fused_gemm.py",
     "    if K == 0:  # the empty sum", "    if False:  # the empty sum",
     [P + "test_kernels_fused_gemm.py::test_an_empty_k_sums_to_zero"]),
    ("fused GEMM kernel: the K loop's skip path left in (wgmmas serialized)", "harness/kernels/fused_gemm_src.py",
     "        tl.assume(kb_end > kb_beg)", "        pass",
     [TT + "test_the_transposed_prefill_launch_keeps_its_wgmmas_asynchronous"]),
]

# The top-k sum (harness/moe/combine.py) and its one-pass kernel.
FAULTS += [
    ("top-k sum: slots added last first", "harness/moe/combine.py",
     "    for j in range(hw.shape[1]):", "    for j in reversed(range(hw.shape[1])):",
     ["suites/properties/test_topk_sum.py::test_slot_order_decides_where_order_matters"]),
    ("top-k sum kernel: the running sum starts from -0.0 (GPU)", "harness/kernels/fused_act_src.py",
     "    acc = tl.zeros((BLOCK,), tl.float32)", "    acc = tl.full((BLOCK,), -0.0, tl.float32)",
     ["suites/properties/test_moe_gpu.py::test_fused_topk_sum_is_bitwise_the_slot_order_sum"]),
]

# The GEMM epilogue: the expert bias and the router weight of each pair, the bits of the torch ops.
EP = "suites/properties/test_kernels_epilogue.py::"
FAULTS += [
    ("GEMM epilogue: router weight of the block's row slot, not of its pair", "harness/kernels/fused_gemm_src.py",
     "acc = acc * tl.load(row_scale_ptr + rows_safe)[:, None]",
     "acc = acc * tl.load(row_scale_ptr + offs_m)[:, None]",
     [EP + "test_epilogue_is_the_torch_ops_bitwise"]),
    ("GEMM epilogue: bias applied after the router weight", "harness/kernels/fused_gemm_src.py",
     "        if HAS_BIAS:  # bias rows of the weight rows (2N of them with ACT)\n"
     "            acc = acc + tl.load(bias_ptr + e * (2 * N if ACT else N) + offs_n, mask=nmask, other=0.0)[None, :]\n"
     "        if ROW_SCALE:\n            acc = acc * tl.load(row_scale_ptr + rows_safe)[:, None]\n",
     "        if ROW_SCALE:\n            acc = acc * tl.load(row_scale_ptr + rows_safe)[:, None]\n"
     "        if HAS_BIAS:\n"
     "            acc = acc + tl.load(bias_ptr + e * (2 * N if ACT else N) + offs_n, mask=nmask, other=0.0)[None, :]\n",
     [EP + "test_epilogue_is_the_torch_ops_bitwise"]),
    ("GEMM epilogue: the split pass forgets the bias a split launch left", "harness/kernels/fused_gemm.py",
     "HAS_BIAS=bias is not None, ROW_SCALE=", "HAS_BIAS=False, ROW_SCALE=",
     [EP + "test_epilogue_is_the_torch_ops_bitwise"]),
    ("GEMM epilogue: the bias fused after a post factor", "harness/kernels/launch_config.py",
     "    in_bias = bias and one_split and not has_post", "    in_bias = bias and one_split",
     [EP + "test_which_launch_does_its_epilogue"]),
    # GEMM1's activation (moe_gemm's act): in the epilogue, or in the split-sum pass
    ("GEMM1 activation epilogue: the up rows read N - 1 rows after the gate rows", "harness/kernels/fused_gemm_src.py",
     "offs_n = offs_o + (lane // HALF) * N", "offs_n = offs_o + (lane // HALF) * (N - 1)",
     [EP + "test_the_activation_is_that_of_the_gemms_result"]),
    ("GEMM1 activation epilogue: gate and up halves swapped", "harness/kernels/fused_gemm_src.py",
     "                gate, up = tl.split(tl.permute(", "                up, gate = tl.split(tl.permute(",
     [EP + "test_the_activation_is_that_of_the_gemms_result"]),
    ("GEMM1 activation epilogue: the bias rows of an expert N apart, not 2N", "harness/kernels/fused_gemm_src.py",
     "bias_ptr + e * (2 * N if ACT else N) + offs_n", "bias_ptr + e * N + offs_n",
     [EP + "test_the_activation_is_that_of_the_gemms_result"]),
    ("split-sum activation: up read from the gate's column", "harness/kernels/fused_gemm_src.py",
     "gate_at + N, p, mask", "gate_at, p, mask",
     [EP + "test_the_activation_is_that_of_the_gemms_result"]),
    ("GEMM1 activation: in the transposed product's decode rows too", "harness/kernels/launch_config.py",
     "    return not swap_mn or block_m >= LARGE_BLOCK_M\n", "    return True\n",
     [EP + "test_which_launch_applies_the_activation"]),
]

# The routing's one-launch top-k: the indices of the stable descending sort.
TK = "suites/properties/test_kernels_topk.py::"
FAULTS += [
    ("top-k: -0.0 ranked below +0.0", "harness/kernels/topk_src.py",
     "    b = tl.where(b == -2147483648, 0, b)", "    b = b",
     [TK + "test_topk_is_the_stable_sort", TK + "test_topk_edges"]),
    ("top-k: ties to the higher index", "harness/kernels/topk_src.py",
     "    key = (mono.to(tl.int64) << IDX_BITS) + (low - e)", "    key = (mono.to(tl.int64) << IDX_BITS) + e",
     [TK + "test_topk_is_the_stable_sort", TK + "test_topk_edges"]),
    ("top-k: NaN keys ranked by their bits, not above +Inf", "harness/kernels/topk_src.py",
     "    mono = tl.where(v != v, 2147483647, mono)", "    mono = mono",
     [TK + "test_topk_is_the_stable_sort", TK + "test_topk_edges"]),
    ("top-k weights: each written one slot later", "harness/kernels/topk_src.py",
     "        slot = tl.where(hit, j, slot)", "        slot = tl.where(hit, (j + 1) % K, slot)",
     [TK + "test_route_weights_are_the_expression", TK + "test_route_edges"]),
    ("top-k weights: the chosen score picked from lanes filled with +0.0", "harness/kernels/topk_src.py",
     "            chosen = _max(tl.where(hit, sbits, -2147483647 - 1), 1)",
     "            chosen = _max(tl.where(hit, sbits, 0), 1)",
     [TK + "test_route_weights_are_the_expression"]),
    ("top-k weights: the routed scaling dropped", "harness/kernels/topk.py",
     "SCALED=weights and scale != 1.0,", "SCALED=False,",
     [TK + "test_route_weights_are_the_expression", TK + "test_route_edges"]),
    ("top-k softmax: exp(x) without the row's max subtracted", "harness/kernels/topk_src.py",
     "        ex = _exp(x - _max(x, 1)[:, None])", "        ex = _exp(x)",
     [TK + "test_softmax_route_is_within_the_bound", TK + "test_softmax_route_edges"]),
    ("top-k softmax: the padding lanes counted in the row's sum", "harness/kernels/topk_src.py",
     '        x = tl.where(ok, v, -float("inf"))', "        x = tl.where(ok, v, 0.0)",
     [TK + "test_softmax_route_is_within_the_bound", TK + "test_softmax_route_edges"]),
    ("routing: a grouped row's softmax taken over its kept groups only (GPU)", "harness/moe/routing.py",
     '    if kernel and arch.scoring == "softmax" and keys is logits:',
     '    if kernel and arch.scoring == "softmax" and not arch.score_correction:',
     [TK + "test_cuda_routing_selects_what_the_sort_selects"]),
    ("top-k weights: a fast division, not IEEE (GPU)", "harness/kernels/topk_src.py",
     "            w = tl.div_rn(w, total[:, None])", "            w = w / total[:, None]",
     [TK + "test_route_edges"]),
]

FAULTS += [
    ("routing weights' bound: the softmax's rounded exp arguments left out", "harness/moe/reference.py",
     "    return d + d.max(dim=-1, keepdim=True).values + (E - 1) / math.e",
     "    return 0 * d",
     [P + "test_kernels_topk.py::test_a_rounded_exp_argument_is_in_the_bound"]),
]

FAULTS += [
    ("launch: a K tail of BLOCK_K masked on every BLOCK_K", "harness/kernels/launch_config.py",
     "    return n > 0 and n % block_n == 0 and k % block_k != 0", "    return False",
     [FG + "test_a_k_tail_masks_only_its_last_block_k"]),
    ("GEMM: the K tail's last, partial BLOCK_K skipped", "harness/kernels/fused_gemm_src.py",
     "    for part in tl.static_range(2 if K_TAIL else 1):", "    for part in tl.static_range(1):",
     [P + "test_moe_layer_smoke.py::test_fused_gemm_tiles_that_do_not_divide"]),
    ("GEMM: the K tail's partial BLOCK_K also run in the unmasked loop", "harness/kernels/fused_gemm_src.py",
     "            kb_hi = tl.minimum(kb_end, kb_full) if K_TAIL else kb_end", "            kb_hi = kb_end",
     [P + "test_moe_layer_smoke.py::test_fused_gemm_tiles_that_do_not_divide"]),
]


# The e2m1 word layout (harness/kernels/fp4_words.py) and the kernel's decode of it.
FAULTS += [
    ("fp4 words: pair 3's e1 bits rotated one place short", "harness/kernels/fused_gemm_src.py",
     "(_rotl(w, 14) & 0x01000100)", "(_rotl(w, 13) & 0x01000100)",
     [FG + "test_fused_dequantize_every_code_and_scale_byte", FG + "test_fused_gemm_picks_out_every_finite_weight"]),
    ("fp4 words: pairs 1 and 2 swapped in K order", "harness/kernels/fused_gemm_src.py",
     "q = tl.join(tl.join(p0, p2), tl.join(p1, p3))  # [n, m, 2, 2]",
     "q = tl.join(tl.join(p0, p1), tl.join(p2, p3))  # [n, m, 2, 2]",
     [FG + "test_fused_dequantize_every_code_and_scale_byte", FG + "test_fused_gemm_picks_out_every_finite_weight"]),
    ("fp4 words: a per-element word's half chosen by k % 8, not k % 2", "harness/kernels/fused_gemm_src.py",
     "half = bits >> ((offs_k % 2) * 16)", "half = bits >> ((offs_k % 8 > 3).to(tl.int64) * 16)",
     [FG + "test_fused_dequantize_every_code_and_scale_byte"]),
    ("fp4 words: the host packs slot 6's magnitude bits in e2m1's order reversed", "harness/kernels/fp4_words.py",
     "(9, (26, 1, 0))", "(9, (0, 1, 26))",
     [FG + "test_fused_dequantize_every_code_and_scale_byte", "suites/properties/test_fp4_words.py"]),
    ("fp4 words: the rotation table the tests read puts pair 2 one place off", "harness/kernels/fp4_words.py",
     "((10, PAIR_MASK),)", "((9, PAIR_MASK),)",
     ["suites/properties/test_fp4_words.py::test_each_pair_is_the_bf16_pattern_of_its_codes"]),
]

# ROCm's bf16 decode: float32 products truncated to bf16 (BF16_TRUNC); FusedWeights' layout checks.
FW = "suites/properties/test_fp4_words.py::"
FAULTS += [
    ("bf16 trunc: the bf16 operand taken two bits too low", "harness/kernels/fused_gemm_src.py",
     "    return (v.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16)",
     "    return (v.to(tl.uint32, bitcast=True) >> 14).to(tl.uint16)",
     [FG + "test_bf16_trunc_dequant_every_code_and_scale_byte"]),
    ("launch: ROCm's bf16 code launches multiply in bf16 (software rounding on gfx942)",
     "harness/kernels/launch_config.py",
     '    "rocm": {"bf16": ("ROCM_BF16_CODE_CONFIGS", "GPU_CONFIGS"),', '    "rocm": {"bf16": ("GPU_CONFIGS",),',
     ["suites/targets/test_targets.py::test_rocm_bf16_code_rows_spare_the_software_rounding",
      "suites/targets/test_launch_selection.py::test_every_launch_choice_matches_the_snapshot"]),
    ("fused weights: a two-level format without its global scale accepted", "harness/kernels/fused_weights.py",
     "            self._check_gscale(spec)\n", "",
     [FW + "test_fused_weights_refuse_strides_and_global_scales_the_kernel_would_misread"]),
    ("fused weights: e2m1 rows not in whole int32 words accepted", "harness/kernels/fused_weights.py",
     "            if any(o % 4 for o in offsets):", "            if False:",
     [FW + "test_fused_weights_refuse_strides_and_global_scales_the_kernel_would_misread"]),
]

# The "mma" word order of CUDA's MX weights and the transposed product (SWAP_MN) that reads it.
FAULTS += [
    ("mma words: read as if in K order", "harness/kernels/fused_gemm_src.py",
     "bits = _fp4_pair_bits_mma(word)", "bits = _fp4_pair_bits(word)",
     [FG + "test_mma_word_order_decodes_every_code_and_scale_byte"]),
    ("mma words: a group's pairs taken word-major", "harness/kernels/fused_gemm_src.py",
     "q = tl.permute(q, (0, 1, 3, 4, 2))", "q = tl.permute(q, (0, 1, 2, 3, 4))",
     [FG + "test_mma_word_order_decodes_every_code_and_scale_byte"]),
    ("mma words: a per-element load takes the K order's word", "harness/kernels/fused_gemm_src.py",
     "word_k = offs_k // 32 * 4 + (offs_k % 8) // 2", "word_k = offs_k // 8",
     [FG + "test_mma_word_order_decodes_every_code_and_scale_byte"]),
    ("mma words: the host packs word t with pairs 4t .. 4t + 3", "harness/kernels/fp4_words.py",
     '"mma": tuple(8 * i + 2 * t + h for t in range(4) for i in range(4) for h in range(2)),',
     '"mma": tuple(8 * t + 2 * i + h for t in range(4) for i in range(4) for h in range(2)),',
     [FW + "test_mma_words_hold_the_pairs_of_one_mma_fragment_thread"]),
    ("split sum: the first partial dropped", "harness/kernels/fused_gemm_src.py",
     "    acc = tl.load(ptrs, mask=mask, other=0.0)\n", "    acc = tl.zeros([BLOCK], tl.float32)\n",
     [EP + "test_split_sum_adds_the_partials_in_split_order_then_the_epilogue",
      "suites/properties/test_moe_layer_smoke.py::test_fused_gemm_split_k_sums_the_k_ranges"]),
    ("split sum: every pair takes expert 0's bias", "harness/kernels/fused_gemm_src.py",
     "        e = tl.load(ids_ptr + p, mask=mask, other=0)", "        e = p * 0",
     [EP + "test_split_sum_adds_the_partials_in_split_order_then_the_epilogue",
      EP + "test_epilogue_is_the_torch_ops_bitwise"]),
    ("launch: the transposed product on K-order words", "harness/kernels/launch_config.py",
     '    if dequant or not mma_order or not (bf16 or override.get("SWAP_MN")):',
     '    if dequant or not (bf16 or override.get("SWAP_MN")):',
     [FG + "test_the_mma_word_order_and_the_transposed_product_go_together"]),
]

# A row's register cap (LaunchRow.maxnreg): a CUDA compile option only.
FAULTS += [
    ("launch: the register cap passed to ROCm and the interpreter", "harness/kernels/launch_config.py",
     '    if vendor != "cuda":  # a PTX register cap: other targets\' compilers take no such option\n',
     "    if False:\n",
     ["suites/targets/test_launch_selection.py::test_maxnreg_is_a_cuda_compile_option"]),
    ("targets: the register cap compiled as a constexpr, not an option", "harness/aot/fused_launches.py",
     '_OPTIONS = ("num_warps", "num_stages", "maxnreg", "enable_fp_fusion")',
     '_OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")',
     ["suites/targets/test_targets.py::test_a_rows_register_cap_reaches_ptxas"]),
]

# FusedWeights.plain_scales: E8M0 multipliers from the byte's bits, only where no byte needs the cases of 0 and 255.
FAULTS += [
    ("weights: a zero scale byte over nonzero codes let through as plain", "harness/kernels/fused_weights.py",
     "    return not bool((blocks & magnitude).any())\n",
     "    return True\n",
     [FG + "test_plain_scales_rule", FG + "test_plain_scales_are_wrong_where_the_rule_refuses_them"]),
    ("kernel: the plain bf16 multiplier built one exponent bit off", "harness/kernels/fused_gemm_src.py",
     "                    m = (sc << 7).to(tl.uint16).to(tl.bfloat16, bitcast=True)\n",
     "                    m = (sc << 6).to(tl.uint16).to(tl.bfloat16, bitcast=True)\n",
     ["suites/properties/test_kernels_fused_gemm.py::test_bf16_gemm_picks_out_every_finite_weight_gpu"]),
    ("kernel: the plain float32 multiplier off by one exponent", "harness/kernels/fused_gemm_src.py",
     "        return (sc << F32_MANT).to(tl.float32, bitcast=True)\n",
     "        return ((sc + 1) << F32_MANT).to(tl.float32, bitcast=True)\n",
     [FG + "test_plain_scales_decode_every_code_and_scale_byte"]),
    ("weights: scale bytes above 128 let through as plain (the folded exponent overflows)",
     "harness/kernels/fused_weights.py",
     "MAX_PLAIN_SCALE_BYTE = 128\n", "MAX_PLAIN_SCALE_BYTE = 254\n",
     [FG + "test_plain_scales_rule"]),
    ("kernel: the folded multiplier one exponent off", "harness/kernels/fused_gemm_src.py",
     "                        sc = sc + (127 - BIAS)\n", "                        sc = sc + (128 - BIAS)\n",
     [FG + "test_bf16_gemm_picks_out_every_finite_weight_gpu"]),
    ("launch: the folded multiply (inline PTX) kept on ROCm", "harness/kernels/launch_config.py",
     '    if not (vendor == "cuda" and (plain or s_fold) and',
     '    if not (vendor in ("cuda", "rocm") and (plain or s_fold) and',
     [FG + "test_the_folded_multiply_only_on_e2m1_in_bf16_on_cuda"]),
    ("launch: NVFP4 folded in the dequant pass too (its values 2^-7 off)", "harness/kernels/launch_config.py",
     "bf16 and has_post and not dequant\n", "bf16 and has_post\n",
     [FG + "test_the_folded_multiply_only_on_e2m1_in_bf16_on_cuda"]),
    ("launch: NVFP4's fold exponent one short (the largest E4M3 s folds to Inf)", "harness/kernels/launch_config.py",
     "* 2.0 ** (127 - spec.element.bias - c) > BF16_MAX:", "* 2.0 ** (126 - spec.element.bias - c) > BF16_MAX:",
     [FG + "test_the_folded_multiply_only_on_e2m1_in_bf16_on_cuda",
      FG + "test_bf16_gemm_picks_out_every_finite_weight_gpu"]),
    ("kernel: NVFP4's folded 2^-7 not given back after the dot", "harness/kernels/fused_gemm_src.py",
     "                acc = acc * (2.0 ** S_FOLD_EXP)\n", "                acc = acc * 1.0\n",
     [FG + "test_bf16_gemm_picks_out_every_finite_weight_gpu"]),
    ("targets: the pairwise cover breaks ties by the last launch, not registry order", "harness/aot/compile.py",
     "            best = int(np.argmax(gains))",
     "            best = len(gains) - 1 - int(np.argmax(gains[::-1]))",
     ["suites/targets/test_targets.py::test_pairwise_cover_picks_what_the_plain_greedy_picks",
      "suites/targets/test_targets.py::test_pairwise_cover_of_the_registry_matches_the_plain_greedy"]),
    ("targets: the pairwise cover counts a launch's pairs unordered", "harness/aot/compile.py",
     "            pair_ids.append(r[j] * n_values + r[k])",
     "            pair_ids.append(np.minimum(r[j], r[k]) * n_values + np.maximum(r[j], r[k]))",
     ["suites/targets/test_targets.py::test_pairwise_cover_picks_what_the_plain_greedy_picks"]),
    ("launch: NVFP4's E4M3 conversion taken below sm_90 (its PTX needs sm_90)", "harness/kernels/launch_config.py",
     "    return e4m3 and tuple(cuda_cc) >= E4M3_CVT_MIN_CC\n", "    return e4m3\n",
     [FG + "test_the_folded_multiply_only_on_e2m1_in_bf16_on_cuda"]),
    ("kernel: the fold's E4M3 multipliers decoded by bits (below sm_90) one exponent off",
     "harness/kernels/fused_gemm_src.py",
     "                            m = m * (2.0 ** (127 - BIAS - S_FOLD_EXP))\n",
     "                            m = m * (2.0 ** (128 - BIAS - S_FOLD_EXP))\n",
     [FG + "test_bf16_gemm_picks_out_every_finite_weight_gpu",
      FG + "test_nvfp4_nan_and_negative_scales_in_the_folded_gemm_gpu"]),
    ("kernel: the converted E4M3 multipliers folded by 2^120, not 2^119", "harness/kernels/fused_gemm_src.py",
     "mov.b32 c, 0x7B007B00;", "mov.b32 c, 0x7B807B80;",
     [FG + "test_bf16_gemm_picks_out_every_finite_weight_gpu",
      FG + "test_nvfp4_nan_and_negative_scales_in_the_folded_gemm_gpu"]),
    ("kernel: the converted pair of E4M3 multipliers swapped", "harness/kernels/fused_gemm_src.py",
     "cvt.bf16.f16 h, h; mov.b32 a, {l, h};", "cvt.bf16.f16 h, h; mov.b32 a, {h, l};",
     [FG + "test_bf16_gemm_picks_out_every_finite_weight_gpu",
      FG + "test_nvfp4_nan_and_negative_scales_in_the_folded_gemm_gpu"]),
    ("bench moe: every row reports plain scales whatever its weights allow", "harness/commands/bench/moe.py",
     "            plain = [fw.plain_scales for fw in moe.experts._kernel_weights]\n",
     "            plain = [True, True]\n",
     ["suites/properties/test_moe_bench_peer.py::test_the_report_says_which_launch_tables_run"]),
    ("launch: plain scales set on two-level rows", "harness/kernels/launch_config.py",
     "    plain = bool(plain_scales) and kind == 1 and hf.get_format(fmt).is_mx\n",
     "    plain = bool(plain_scales) and kind == 1\n",
     [FG + "test_plain_scales_rule"]),
    ("kernel: the scale bytes read with unit block stride (scale order 'n' misread)", "harness/kernels/fused_gemm_src.py",
     "sc = tl.load(m_base + offs_b[None, :] * stride_mb)\n", "sc = tl.load(m_base + offs_b[None, :])\n",
     [FG + "test_fused_dequantize_every_code_and_scale_byte", FG + "test_fused_gemm_picks_out_every_finite_weight"]),
    ("launch: scale order 'n' taken by short K loops too", "harness/kernels/launch_config.py",
     "return \"n\" if k > SHORT_K_MAX and rows % SCALE_ALIGN", "return \"n\" if rows > 1 and rows % SCALE_ALIGN",
     ["suites/targets/test_launch_selection.py::test_scale_order_where_rows_are_not_16_bytes"]),
    ("fused weights: the by-experts build allocates scale order 'n' as 'k'", "harness/kernels/fused_weights.py",
     "                    n_order = _n_order(t)\n", "                    n_order = False\n",
     [P + "test_moe_keep_codes.py::test_kernel_weights_built_by_experts_are_bitwise_the_whole_build"]),
    ("memory model: the kernel's copy of reordered scale bytes not counted", "harness/models/shapes.py",
     "return codes + self.reordered_scale_bytes_per_layer(block, fp4=fp4, mma=mma, stored=True)", "return codes",
     ["suites/multigpu/test_resident_bytes.py::test_resident_bytes_are_the_paper_figure"]),
    ("targets: the fused GEMM's launches registered in scale order 'k' only", "harness/aot/fused_launches.py",
     'SCALE_ORDER_STRIDES = (("", {"stride_mb": 1}), (".n", {"stride_mn": 1}))',
     'SCALE_ORDER_STRIDES = (("", {"stride_mb": 1}),)',
     ["suites/targets/test_targets.py::test_code_launches_compile_in_both_scale_orders"]),
    ("targets: the scale strides left unbound (no launch as Triton specialises it)", "harness/aot/fused_launches.py",
     'SCALE_ORDER_STRIDES = (("", {"stride_mb": 1}), (".n", {"stride_mn": 1}))',
     'SCALE_ORDER_STRIDES = (("", {}), (".n", {}))',
     ["suites/targets/test_targets.py::test_code_launches_compile_in_both_scale_orders"]),
    ("bench moe: every row reports scale order 'k' whatever its weights take", "harness/commands/bench/moe.py",
     "            orders = [fw.scale_order for fw in moe.experts._kernel_weights]",
     "            orders = [\"k\", \"k\"]",
     ["suites/properties/test_moe_bench_peer.py::test_the_report_says_which_launch_tables_run"]),
    ("kernel: the transposed product's epilogue takes up rows for gate rows", "harness/kernels/fused_gemm_src.py",
     "        offs_n = offs_o + ((lane // 8) % 2) * N\n",
     "        offs_n = offs_o + (1 - (lane // 8) % 2) * N\n",
     [P + "test_kernels_epilogue.py::test_the_transposed_products_activation_is_that_of_the_gemms_result"]),
    ("experts.apply: expert ids outside [0, E) computed (dropped or read past the weights)", "harness/moe/experts.py",
     "    torch._assert_async(((topk_ids >= 0) & (topk_ids < num_experts)).all(),",
     "    torch._assert_async((topk_ids >= 0).all() | True,",
     [P + "test_moe_inputs.py::test_apply_refuses_an_id_outside_the_experts"]),
    ("moe inputs: hidden of another H taken", "harness/moe/experts.py",
     "    if hidden.dim() != 2 or hidden.shape[1] != hidden_size or not hidden.dtype.is_floating_point:",
     "    if hidden.dim() != 2 or not hidden.dtype.is_floating_point:",
     [P + "test_moe_inputs.py::test_forward_refuses_inputs_of_another_shape",
      P + "test_moe_inputs.py::test_apply_refuses_inputs_of_another_shape_or_dtype"]),
    ("forward: router logits of another width than E routed", "harness/moe/layer.py",
     "        if tuple(router_logits.shape) != (T, E) or not router_logits.dtype.is_floating_point:",
     "        if router_logits.shape[0] != T or not router_logits.dtype.is_floating_point:",
     [P + "test_moe_inputs.py::test_forward_refuses_inputs_of_another_shape"]),
]


def table_problems(faults=None) -> list[str]:
    """One line per fault whose pattern does not occur exactly once in its
    file, or that names a test file or test function that does not exist."""
    out = []
    for name, path, old, _new, tests in faults if faults is not None else FAULTS:
        f = ROOT / path
        n = f.read_text().count(old) if f.is_file() else 0
        if n != 1:
            out.append(f"{name}: pattern found {n} times in {path} (must be exactly once)")
        for t in tests:
            file, _, func = t.partition("::")
            tf = ROOT / file
            if not tf.is_file():
                out.append(f"{name}: test file {file} does not exist")
            elif func and not re.search(rf"^def {re.escape(func)}\b", tf.read_text(), re.M):
                out.append(f"{name}: test {t} does not exist")
    return out


DOC = ROOT / "docs" / "fault-injection.md"
DOC_BEGIN = "<!-- generated by python -m suites.fault_injection --render-docs; do not edit -->"
DOC_END = "<!-- end generated -->"


def render_table(faults=None) -> str:
    """The markdown table of the fault list: one row per fault, its file and
    the tests expected to go red. docs/fault-injection.md holds it between
    DOC_BEGIN and DOC_END."""
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| fault injected | file | tests expected to go red |", "|---|---|---|"]
    for name, path, _old, _new, tests in faults if faults is not None else FAULTS:
        lines.append(f"| {cell(name)} | `{path}` | {', '.join(f'`{cell(t)}`' for t in tests)} |")
    return "\n".join(lines) + "\n"


def doc_block(text: str) -> str | None:
    """The text between the doc's markers, or None when they are missing."""
    _head, sep, rest = text.partition(DOC_BEGIN + "\n")
    body, sep2, _tail = rest.partition(DOC_END)
    return body if sep and sep2 else None


def render_docs(path: Path = DOC) -> bool:
    """Rewrite the generated block of `path` with render_table(); True when it changed."""
    text = path.read_text()
    old = doc_block(text)
    if old is None:
        raise SystemExit(f"{path}: markers {DOC_BEGIN!r} ... {DOC_END!r} not found")
    new = render_table()
    if old == new:
        return False
    head, _, rest = text.partition(DOC_BEGIN + "\n")
    _, _, tail = rest.partition(DOC_END)
    path.write_text(head + DOC_BEGIN + "\n" + new + DOC_END + tail)
    return True


def run_fault(name, path, old, new, tests, python):
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "repo"
        shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
            ".venv", ".git", "reports", "*.egg-info", ".hypothesis", ".ruff_cache", "__pycache__"))
        f = dst / path
        text = f.read_text()
        if text.count(old) != 1:
            return {"fault": name, "error": f"pattern found {text.count(old)} times in {path} (must be exactly once)"}
        f.write_text(text.replace(old, new, 1))
        env = dict(os.environ, PYTHONPATH=str(dst), HARNESS_PROFILE="dev", PYTHONDONTWRITEBYTECODE="1")
        for k in ("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT"):  # a CI shard must not deselect the test
            env.pop(k, None)
        out = {}
        for t in tests:
            r = subprocess.run([python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-W", "ignore", t],
                               cwd=dst, env=env, capture_output=True, text=True)
            out[t] = "red" if r.returncode == 1 else ("green" if r.returncode == 0 else f"rc={r.returncode}")
        return {"fault": name, "file": path, "tests": out, "caught": any(v == "red" for v in out.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--only", help="substring of a fault name")
    ap.add_argument("--render-docs", action="store_true",
                    help="rewrite the generated table in docs/fault-injection.md and exit")
    args = ap.parse_args(argv)
    if args.render_docs:
        changed = render_docs()
        print(f"{DOC.relative_to(ROOT)}: {'rewritten' if changed else 'up to date'}")
        return 0
    problems = table_problems()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    rows = [run_fault(*f, python=sys.executable) for f in FAULTS if not args.only or args.only in f[0]]
    for r in rows:
        print(f"{'CAUGHT' if r.get('caught') else 'MISSED'}  {r['fault']}: {r.get('tests') or r.get('error')}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r.get("caught") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
