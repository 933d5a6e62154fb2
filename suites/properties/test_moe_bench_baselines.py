"""The bench's baselines and limits (harness/moe/baselines.py, limits.py):
what the bench's targets are measured against must itself be right."""
import pytest
import torch

from harness.moe import limits
from harness.moe.baselines import bf16_grouped_forward, bf16_loop_forward


def _problem(seed, T=37, E=5, k=2, H=32, inter=48):
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(E, 2 * inter, H, generator=g) / H ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, H, inter, generator=g) / inter ** 0.5).to(torch.bfloat16)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    lg = torch.randn(T, E, generator=g)
    lg[:, 3] = -1e4  # one expert no token chooses: an empty group
    return x, lg, w13, w2, k


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grouped_forward_is_the_loop_forward(seed):
    # Both run the same bf16 GEMM per expert on the same rows in the same
    # order (pairs sorted stably by expert); only the grouping mechanism
    # differs, so the outputs are identical bit for bit.
    x, lg, w13, w2, k = _problem(seed)
    loop = bf16_loop_forward(x, lg, w13, w2, k)
    grouped = bf16_grouped_forward(x, lg, w13, w2, k)
    assert torch.equal(loop, grouped)


def test_stored_bytes_and_read_limit_follow_the_format_table():
    assert limits.stored_bytes_per_weight("nvfp4") == 0.5 + 1 / 16
    assert limits.stored_bytes_per_weight("mxfp4") == 0.5 + 1 / 32
    assert limits.stored_bytes_per_weight("mxfp8_e4m3") == 1 + 1 / 32
    # Mixtral, 2 routed experts, mxfp4, 1000 GB/s: 2 * 3*4096*14336 * (17/32) B / 1e12 B/s
    assert limits.read_limit_ms(2, 4096, 14336, "mxfp4", 1000.0) == pytest.approx(
        2 * 3 * 4096 * 14336 * 17 / 32 / 1e12 * 1e3, rel=1e-12)
    assert limits.read_limit_ms(2, 4096, 14336, "mxfp4", None) is None


def test_routed_experts_counts_distinct_choices():
    lg = torch.tensor([[5.0, 4.0, 0.0, 0.0], [0.0, 5.0, 4.0, 0.0], [5.0, 0.0, 4.0, 0.0]])
    assert limits.routed_experts(lg, 2) == 3
    assert limits.routed_experts(lg[:1], 2) == 2


@pytest.mark.parametrize("flag,value,message", [
    ("precision", "bf16", "--precision bf16 needs a GPU"),
    ("precision", "fp8", "--precision 'fp8' unknown"),
    ("shapes", "tiny,nope", "--shapes nope unknown"),
])
def test_bench_moe_refuses_bad_arguments_in_one_line(flag, value, message):
    """Before any weights are built: a shape it does not know, a precision
    that does not exist, or bf16 on the CPU (the interpreter's bf16 dot is
    wrong) is one line naming the flag, not a traceback or a wrong table."""
    import argparse

    from harness.commands.bench import moe as bench

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["--shapes", "tiny", "--tokens", "1", "--device", "cpu", f"--{flag}", value])
    with pytest.raises(SystemExit, match=message):
        bench.run(args)
