"""`bench moe` against its production peer (harness/commands/bench/moe_peer.py):
the peer is handed the same MXFP4 codes the harness' w_mxfp4 row runs, every
harness row's peer ratio and target read the peer row of its own shape and T,
a shape the peer cannot run is a row saying why, and a peer folder that holds
no triton_kernels is one line, exit 2. The peer itself needs a CUDA GPU; here
a stand-in forward takes its place (the timing wiring is what is tested)."""
import argparse
import types

import pytest
import torch

import harness.formats as hf
from harness import cli
from harness.commands.bench import moe as bench
from harness.commands.bench import moe_peer
from harness.moe.schemes import get_scheme


def _args(*extra):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(["--shapes", "tiny", "--tokens", "1,16", "--device", "cpu", "--iters", "1", "--warmup", "0",
                         "--no-loop", *extra])


def test_the_peer_gets_the_codes_the_harness_w4a16_row_runs():
    """Unpacked and de-interleaved, the peer's weights are exactly what the
    harness' w_mxfp4 row quantizes from the same bf16 weights."""
    g = torch.Generator().manual_seed(3)
    E, I, H = 3, 64, 96
    w13 = torch.randn(E, 2 * I, H, generator=g).to(torch.bfloat16)
    w2 = torch.randn(E, H, I, generator=g).to(torch.bfloat16)
    got = moe_peer.peer_weights(w13, w2)
    s = get_scheme("w_mxfp4")
    q13 = hf.quantize(w13.float(), s.weight_fmt, scale_mode=s.scale_mode)
    q2 = hf.quantize(w2.float(), s.weight_fmt, scale_mode=s.scale_mode)
    c13 = hf.unpack_fp4(got["w13_weight"])
    assert torch.equal(c13[:, 0::2], q13.codes[:, :I]) and torch.equal(c13[:, 1::2], q13.codes[:, I:])
    assert torch.equal(got["w13_weight_scale"][:, 0::2], q13.scales[:, :I])
    assert torch.equal(got["w13_weight_scale"][:, 1::2], q13.scales[:, I:])
    assert torch.equal(hf.unpack_fp4(got["w2_weight"]), q2.codes) and torch.equal(got["w2_weight_scale"], q2.scales)


def _stand_in(monkeypatch, fail_at=None, build_error=None):
    """A peer that 'runs' on the CPU: resolve() finds it, build() returns a forward."""
    seen = []

    def build(tk, w13, w2, k):
        if build_error:
            raise build_error
        seen.append(w13.shape)

        def fwd(x, lg):
            if fail_at is not None and x.shape[0] == fail_at:
                raise RuntimeError("stand-in refuses this T")
            return x * 1.0
        return fwd

    monkeypatch.setattr(moe_peer, "resolve", lambda choice, device: (types.SimpleNamespace(), "stand-in", None))
    monkeypatch.setattr(moe_peer, "build", build)
    return seen


def _rows(result, **match):
    return [r for r in result["results"] if all(r.get(k) == v for k, v in match.items())]


def _harness(result, **match):
    """The harness' own rows (the peer's rows carry the path "triton_kernels")."""
    return [r for r in _rows(result, **match) if r["path"] != "triton_kernels"]


def test_every_harness_row_is_held_to_the_peer_row_of_its_shape_and_t(monkeypatch):
    _stand_in(monkeypatch)
    result = bench.run(_args("--schemes", "w_mxfp4,w_mxfp4_a_mxfp4"))
    assert result["peer"]["origin"] == "stand-in" and "matmul_ogs" in result["peer"]["computes"]
    for T in (1, 16):
        (peer,) = _rows(result, T=T, path="triton_kernels")
        assert peer["vs_peer"] == 1.0
        for scheme, limit in (("w_mxfp4", 1.0), ("w_mxfp4_a_mxfp4", 1.25)):
            (row,) = _harness(result, T=T, scheme=scheme)
            assert row["vs_peer"] == pytest.approx(row["best_ms"] / peer["best_ms"])
            assert row["peer_target"] == f"<= {limit}x triton_kernels W4A16"
            assert row["peer_target_met"] == (row["best_ms"] <= limit * peer["best_ms"])
    assert "vs peer" in bench.markdown(result)


def test_a_t_the_peer_cannot_run_is_a_row_saying_why(monkeypatch):
    _stand_in(monkeypatch, fail_at=16)
    result = bench.run(_args("--schemes", "w_mxfp4"))
    (bad,) = _rows(result, T=16, path="triton_kernels")
    assert bad["error"] == "RuntimeError: stand-in refuses this T" and "best_ms" not in bad
    (row,) = _harness(result, T=16, scheme="w_mxfp4")
    assert row["vs_peer"] is None and row["peer_target_met"] is None
    (ok,) = _harness(result, T=1, scheme="w_mxfp4")
    assert ok["vs_peer"] is not None
    assert "not run: RuntimeError: stand-in refuses this T" in bench.markdown(result)


def test_a_shape_the_peer_cannot_build_is_a_row_saying_why(monkeypatch):
    _stand_in(monkeypatch, build_error=ValueError("K must be a multiple of 128"))
    result = bench.run(_args("--schemes", "w_mxfp4"))
    (bad,) = _rows(result, path="triton_kernels")
    assert bad["T"] is None and bad["error"] == "ValueError: K must be a multiple of 128"
    assert all(r.get("vs_peer") is None for r in _rows(result, scheme="w_mxfp4", path="fused (auto) (ieee)"))


def test_without_a_gpu_the_report_says_why_the_peer_is_absent():
    result = bench.run(_args("--schemes", "w_mxfp4"))
    assert "absent" in result["peer"] and "CUDA" in result["peer"]["absent"]
    assert not _rows(result, path="triton_kernels")
    assert all("peer_target" not in r for r in result["results"])


def test_a_peer_folder_without_triton_kernels_is_one_line_exit_2(tmp_path, capsys):
    rc = cli.main(["bench", "moe", "--shapes", "tiny", "--tokens", "1", "--device", "cpu", "--peer", str(tmp_path),
                   "--reports", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"moe-harness bench moe: --peer {tmp_path}: no triton_kernels package in {tmp_path} "
                               f"(expected {tmp_path}/triton_kernels/__init__.py)"]


def test_peer_none_leaves_it_out():
    result = bench.run(_args("--schemes", "w_mxfp4", "--peer", "none"))
    assert result["peer"]["absent"] == "left out (--peer none)"


def test_the_report_says_which_launch_tables_run(monkeypatch):
    """Every bench moe report holds the dispatch of its device (launch tables by
    operand class, their rows' tiles and decode flags, the e2m1 word order
    per format, the scale order rule); on ROCm the bf16 code rows show
    BF16_TRUNC, on CUDA the decode rows SWAP_MN and MXFP4 the "mma" order.
    Each row says which multiplier decode and which scale order (w13, w2)
    its weights take."""
    from harness.kernels import launch_config as lc

    result = bench.run(_args("--schemes", "w_mxfp4", "--peer", "none"))
    d = result["dispatch"]
    assert d["vendor"] == "interpreter" and d["launch_tables"] == lc.launch_tables("interpreter")
    assert d["rows"]["bf16"]["small"] == lc.INTERP_CONFIGS["small"].settings()
    rocm = lc.dispatch("rocm")
    assert rocm["launch_tables"]["bf16"] == "ROCM_BF16_CODE_CONFIGS"
    assert rocm["rows"]["bf16"]["small"]["BF16_TRUNC"] is True
    assert "BF16_TRUNC" not in lc.dispatch("cuda")["rows"]["bf16"]["small"]
    # which word order e2m1 weights take, and the decode rows' transposed product on CUDA only
    assert lc.dispatch("cuda")["e2m1_word_order"] == {"mxfp4": "mma", "nvfp4": "k"}
    assert rocm["e2m1_word_order"] == d["e2m1_word_order"] == {"mxfp4": "k", "nvfp4": "k"}
    assert lc.dispatch("cuda")["rows"]["bf16"]["small"]["SWAP_MN"] is True
    assert "SWAP_MN" not in rocm["rows"]["bf16"]["small"]
    # the folded multiply on CUDA's decode rows only, and each row says which multiplier decode its weights allow
    assert lc.dispatch("cuda")["rows"]["bf16"]["small"]["FOLD_BIAS"] is True
    assert "FOLD_BIAS" not in rocm["rows"]["bf16"]["small"] and "plain_scales" in d
    fused = _rows(result, scheme="w_mxfp4", path="fused (auto) (ieee)")
    assert fused and all(r["plain_scales"] == [True, True] for r in fused)
    nv = bench.run(_args("--schemes", "nvfp4", "--peer", "none"))
    assert all(r["plain_scales"] == [False, False] for r in nv["results"] if r["scheme"] == "nvfp4")
    # the tiny shape's rows of 2-4 scale bytes are a short K loop: "k"; with the rule giving "n", the rows say so
    assert "scale_order" in d and all(r["scale_order"] == ["k", "k"] for r in fused)
    from harness.kernels import fused_weights

    monkeypatch.setattr(fused_weights, "preferred_scale_order", lambda n, k, block: "n")
    n_rows = _rows(bench.run(_args("--schemes", "w_mxfp4", "--peer", "none")), scheme="w_mxfp4")
    assert n_rows and all(r["scale_order"] == ["n", "n"] for r in n_rows)
    with pytest.raises(ValueError, match="unknown vendor 'tpu'"):
        lc.dispatch("tpu")
