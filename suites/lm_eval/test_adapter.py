"""The `moe-emu` adapter under lm-eval's own simple_evaluate on the local tasks."""

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")
import lm_eval

from harness.lmeval.adapter import MoEEmuLM
from harness.lmeval.tasks import TINY_TASKS, task_manager

LIMIT = 16


def _evaluate(lm, limit=LIMIT):
    return lm_eval.simple_evaluate(model=lm, tasks=list(TINY_TASKS), num_fewshot=0, limit=limit,
                                   task_manager=task_manager(), log_samples=True, bootstrap_iters=0,
                                   random_seed=0, numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=0)


def test_registered_under_moe_emu():
    from lm_eval.api.registry import get_model

    assert get_model("moe-emu") is MoEEmuLM


def test_simple_evaluate_bf16_all_three_output_types(tiny_lm):
    tiny_lm.set_scheme("bf16")
    out = _evaluate(tiny_lm)
    res = out["results"]
    assert res["tiny_add_mc"]["acc,none"] >= 0.9
    assert res["tiny_add_gen"]["exact_match,none"] >= 0.9
    assert 0 < res["tiny_add_rolling"]["bits_per_byte,none"] < 3
    gen = out["samples"]["tiny_add_gen"][0]
    assert gen["filtered_resps"][0] == gen["target"]  # generate_until stopped at the newline


def test_batched_scoring_equals_one_at_a_time(tiny_lm):
    """Right padding and length sorting do not change any score."""
    tiny_lm.set_scheme("bf16")
    rows = [tiny_lm.tok_encode(t) for t in ("12+34=46\n", "999+1=1000\n7+8=15\n", "5+5=")]
    batched = tiny_lm.logprobs(rows)
    for r, lp in zip(rows, batched):
        torch.testing.assert_close(tiny_lm.logprobs([r])[0], lp, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("scheme", ["bf16", "nvfp4"])
def test_span_scores_equal_full_logprobs_bitwise(tiny_lm, scheme):
    """loglikelihood normalises only the continuation's positions on the
    device (span_scores); the values equal those gathered from the full
    [T, V] log-probabilities the KL gate uses, bit for bit, and so do the
    greedy flags, for rows of several lengths batched together."""
    tiny_lm.set_scheme(scheme)
    texts = ("12+34=46\n", "999+1=1000\n7+8=15\n", "5+5=10", "100+250=350\n1+1=2\n")
    rows = [tiny_lm.tok_encode(t) for t in texts]
    spans = [(len(r) - n - 1, r[len(r) - n:]) for r, n in zip(rows, (3, 5, 2, 7))]
    rows = [r[:-1] for r in rows]
    full = tiny_lm.logprobs(rows)
    got = tiny_lm.span_scores(rows, spans)
    for lp, (first, target), (ll, greedy) in zip(full, spans, got):
        sel = lp[first:first + len(target)]
        tgt = torch.tensor(target)
        assert ll == float(sel.gather(1, tgt[:, None]).sum())
        assert greedy == bool((sel.argmax(-1) == tgt).all())


def test_rolling_equals_sum_of_token_logprobs(tiny_lm):
    from lm_eval.api.instance import Instance

    tiny_lm.set_scheme("bf16")
    text = "12+34=46\n100+250=350\n"
    (ll,) = tiny_lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (text,), 0)], disable_tqdm=True)
    ids = [tiny_lm.eot_token_id] + tiny_lm.tok_encode(text)
    lp = tiny_lm.logprobs([ids[:-1]])[0]
    want = float(lp.gather(1, torch.tensor(ids[1:])[:, None]).sum())
    assert ll == pytest.approx(want, abs=1e-4)


def test_quantized_scheme_through_simple_evaluate(tiny_lm):
    """A quantized scheme changes the scores (the swap is live) and stays usable."""
    tiny_lm.set_scheme("bf16")
    base = _evaluate(tiny_lm, limit=8)["results"]["tiny_add_rolling"]["bits_per_byte,none"]
    tiny_lm.set_scheme("w_mxfp4_a_mxfp4")
    try:
        res = _evaluate(tiny_lm, limit=8)["results"]
    finally:
        tiny_lm.set_scheme("bf16")
    assert res["tiny_add_rolling"]["bits_per_byte,none"] != base
    assert res["tiny_add_mc"]["acc,none"] >= 0.5


def test_nvfp4_uses_calibrated_activation_scales(tiny_lm):
    tiny_lm.set_scheme("nvfp4")
    tiny_lm.set_scheme("bf16")
    info = tiny_lm.describe()["calibration"]
    assert "calibration_texts" in info["source"]
    scales = tiny_lm.activation_scales
    assert len(scales) == len(tiny_lm.swapper.specs)
    for name, st in tiny_lm.calibration_info["amax"].items():
        assert st["a1_amax"] > 0 and st["a2_amax"] > 0
        assert float(scales[name]["a1_gscale"]) == pytest.approx(448 * 6 / st["a1_amax"], rel=1e-6)


def test_checkpoint_activation_amax_is_used(tmp_path):
    import json
    import shutil

    from harness.models import tiny_model

    folder = tmp_path / "m"
    shutil.copytree(tiny_model.bundled_dir(), folder)
    lm0 = MoEEmuLM(pretrained=str(folder), scheme="bf16")
    amax = {s.name: {"a1_amax": 10.0, "a2_amax": 5.0} for s in lm0.swapper.specs}
    (folder / "activation_amax.json").write_text(json.dumps(amax))
    lm = MoEEmuLM(pretrained=str(folder), scheme="nvfp4")
    assert lm.describe()["calibration"]["source"].startswith("checkpoint")
    assert float(next(iter(lm.activation_scales.values()))["a2_gscale"]) == pytest.approx(448 * 6 / 5.0)


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no hub access"):
        MoEEmuLM(pretrained=str(tmp_path / "nope"))
