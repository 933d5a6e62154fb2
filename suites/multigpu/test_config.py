"""harness.parallelize in accuracy configs: parsed, refused when malformed,
passed to moe-emu (a separate loaded model from the single-device one)."""

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is the [lmeval] extra: pip install -e '.[lmeval]'")

from harness.lmeval.config import ConfigError, load
from harness.lmeval.evaluate import Session

BASE = """model_name: tiny-moe
tasks:
- name: tiny_add_mc
  metrics: [{name: acc, value: null}]
harness:
  model_dir: tiny-moe
"""


def _cfg(tmp_path, extra):
    p = tmp_path / "c.yaml"
    p.write_text(BASE + extra)
    return load(str(p))


def test_parallelize_parsed(tmp_path):
    assert _cfg(tmp_path, "  parallelize: true\n").parallelize is True
    assert _cfg(tmp_path, "").parallelize is False


@pytest.mark.parametrize("extra, msg", [("  parallelize: yes please\n", "expected true or false"),
                                        ("  parallelize: true\n  device: cpu\n", "drop harness.device")])
def test_parallelize_refused(tmp_path, extra, msg):
    with pytest.raises(ConfigError, match=rf"harness.parallelize.*{msg}"):
        _cfg(tmp_path, extra)


def test_session_passes_parallelize(tmp_path, monkeypatch):
    seen = _fake_lm(monkeypatch)
    s = Session()
    s.lm("tiny-moe", _cfg(tmp_path, "  parallelize: true\n"), "nvfp4")
    s.lm("tiny-moe", _cfg(tmp_path, ""), "nvfp4")
    assert [kw.get("parallelize") for kw in seen] == [True, None]


def _fake_lm(monkeypatch):
    seen = []

    class Fake:
        def __init__(self, **kw):
            seen.append(kw)

        def set_scheme(self, s):
            pass

    monkeypatch.setattr("harness.lmeval.adapter.MoEEmuLM", Fake)
    return seen


@pytest.mark.parametrize("backend", ["fused", "unfused"])
def test_session_keeps_codes_iff_the_oracle_is_asked(tmp_path, monkeypatch, backend):
    """Codes are dropped exactly when the backend is fused and the run does not
    ask for the certified oracle; a model loaded without them is not reused
    for a run that asks."""
    seen = _fake_lm(monkeypatch)
    s = Session()
    cfg = _cfg(tmp_path, f"  backend: {backend}\n")
    s.lm("tiny-moe", cfg, "nvfp4", oracle=False)
    s.lm("tiny-moe", cfg, "nvfp4", oracle=True)
    s.lm("tiny-moe", cfg, "nvfp4", oracle=False)
    assert [kw["oracle"] for kw in seen] == ([False, True] if backend == "fused" else [True])


@pytest.mark.parametrize("kl, asked", [("", False), ("    kl: {task: tiny_add_mc, max: 1.0}\n", False),
                                       ("    kl: {task: tiny_add_mc, oracle_max: 0.0}\n", True)])
def test_run_config_asks_for_the_oracle_iff_the_gate_is_planned(tmp_path, monkeypatch, kl, asked):
    from harness.lmeval import evaluate

    seen = []

    class Stop(Exception):
        pass

    def lm(self, model_dir, cfg, scheme, checkpoint=None, oracle=True):
        seen.append(oracle)
        raise Stop

    monkeypatch.setattr(evaluate.Session, "lm", lm)
    monkeypatch.setattr(evaluate, "resolve_model_dir", lambda cfg, model, optional=False: str(tmp_path))
    cfg = _cfg(tmp_path, "  scheme: nvfp4\n  backend: fused\n" + ("  gates:\n" + kl if kl else ""))
    with pytest.raises(Stop):
        evaluate.run_config(cfg)
    assert seen == [asked]
