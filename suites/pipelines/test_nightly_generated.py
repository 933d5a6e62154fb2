"""buildkite/nightly.yml is generated from the scheme table, the
real-checkpoint configs and the tiny family model configs
(harness/pipelines/nightly.py); the committed file must equal the generated
one, a new scheme row yields its steps and every tiny family config gets a
step on both GPU targets."""
import shutil
from pathlib import Path

from harness.moe.schemes import SCHEME_NAMES
from harness.pipelines import lints, model, nightly
from harness.commands import pipeline as command

REPO = Path(__file__).resolve().parents[2]


def test_committed_nightly_is_the_generated_one():
    want = nightly.render(SCHEME_NAMES, nightly.checkpoint_configs(REPO), nightly.tiny_family_configs(REPO))
    got = (REPO / nightly.NIGHTLY_PATH).read_text()
    assert got == want, "buildkite/nightly.yml is stale: run `moe-harness pipeline generate`"


def _copy(tmp_path):
    (tmp_path / "buildkite").mkdir()
    shutil.copy(REPO / nightly.NIGHTLY_PATH, tmp_path / nightly.NIGHTLY_PATH)
    shutil.copytree(REPO / nightly.CONFIG_DIR, tmp_path / nightly.CONFIG_DIR)


def test_generate_check_fails_on_a_stale_file_and_generate_fixes_it(tmp_path, capsys):
    _copy(tmp_path)
    assert command.generate(tmp_path, check=True) == 0
    path = tmp_path / nightly.NIGHTLY_PATH
    path.write_text(path.read_text().replace("tiny-w_mxfp8", "tiny-w_mxfp9"))
    assert command.generate(tmp_path, check=True) == 1
    assert "differs from the generated pipeline" in capsys.readouterr().err
    assert command.generate(tmp_path) == 0
    assert command.generate(tmp_path, check=True) == 0


def test_a_new_scheme_row_gets_tiny_eval_steps_on_both_gpus_and_needs_its_config(tmp_path):
    _copy(tmp_path)
    text = nightly.render((*SCHEME_NAMES, "w_newfmt"), nightly.checkpoint_configs(tmp_path))
    for t in ("cuda", "rocm"):
        assert f"key: {t}-eval-tiny-w_newfmt\n" in text
    path = tmp_path / nightly.NIGHTLY_PATH
    path.write_text(text)
    problems = [str(p) for p in lints.lint(model.load(path), tmp_path)]
    assert any("tiny-w_newfmt.yaml" in p for p in problems), problems


def test_extra_steps_are_rendered_before_the_report(monkeypatch):
    extra = nightly.Step(":nvidia: extra (cuda)", "cuda-extra", nightly.CUDA, 30, ("make install", "echo hi"))
    monkeypatch.setattr(nightly, "EXTRA_STEPS", (extra,))
    text = nightly.render(SCHEME_NAMES, nightly.checkpoint_configs(REPO))
    assert text.index("key: cuda-extra") < text.index("- wait: ~")
    assert "      - timeout --kill-after=60 20m echo hi\n" in text


def test_every_tiny_family_config_is_a_nightly_step_on_both_gpus():
    from harness.lmeval.configs import tiny_family_config_paths

    names = nightly.tiny_family_configs(REPO)
    assert names == sorted(p.name for p in tiny_family_config_paths())  # the glob finds exactly the table's
    text = (REPO / nightly.NIGHTLY_PATH).read_text()
    for c in names:
        for t in ("cuda", "rocm"):
            assert f"key: {t}-eval-{c[:-len('.yaml')]}\n" in text, (t, c)
            assert f"moe-harness eval --config {nightly.CONFIG_DIR}/{c}\n" in text
