"""A swapped sparse-MoE block must compute what the transformers block it
replaces computes. Bug classes: gate and up de-interleaved the wrong way
(gpt-oss interleaves them), a transposed layout read untransposed, a shared
expert dropped, a router bias or DeepSeek's e_score_correction_bias dropped,
the group limit or the routed scaling factor ignored, the routing weight
applied to the output instead of the input (Llama4).

The check runs both blocks on the same float32 input, the swapped one built
with the unquantized scheme (float32 GEMMs): the router logits are the same
float32 values on both sides, so both choose the same experts, and the outputs
differ only by float32 rounding of the same sums in another order. Bound: each
output element of either block lies within gamma_n (n = H + I + k + 2 terms of
float32 sums, activation included, <= 256 here) of the exact value, relative
to the magnitude of the terms summed; the terms of a random block exceed its
output by less than a factor 16 (cancellation), so
|swapped - original| <= 2 * 256 * u * 16 * scale = 2^-11 * scale, with scale
the largest |output| of the token (rows of near-zero output get the block's
largest). Every bug class above changes a token's output by a large fraction
of its scale (suites/lm_eval/test_moe_swap.py shows each one red)."""
from __future__ import annotations

import torch

RELATIVE_BOUND = 2.0 ** -11


def block_output(block: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The hidden-state output of a block (Llama4 / gpt-oss blocks return a pair)."""
    out = block(hidden)
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def block_deviation(original: torch.nn.Module, swapped: torch.nn.Module, hidden: torch.Tensor) -> dict:
    """Largest |swapped - original| over the bound of each token (module docstring)."""
    x = hidden.to(torch.float32)
    want = block_output(original, x).reshape(-1, x.shape[-1]).double()
    got = block_output(swapped, x).reshape(-1, x.shape[-1]).double()
    scale = want.abs().amax(dim=-1, keepdim=True)
    scale = torch.maximum(scale, torch.full_like(scale, float(scale.max()) * 2.0 ** -8))
    ratio = (got - want).abs() / (RELATIVE_BOUND * scale)
    return {"max_ratio": float(ratio.max()), "tokens_outside": int((ratio > 1).any(-1).sum()),
            "tokens": int(ratio.shape[0])}


def check_block_matches(original: torch.nn.Module, swapped: torch.nn.Module, hidden: torch.Tensor,
                        name: str = "block") -> dict:
    """AssertionError naming the block when any token is outside the bound."""
    d = block_deviation(original, swapped, hidden)
    assert d["tokens_outside"] == 0, (
        f"{name}: swapped block differs from the transformers block on {d['tokens_outside']} of {d['tokens']} "
        f"tokens (largest |diff| = {d['max_ratio']:.3g} x the float32 bound): its layout or routing was misread")
    return d
