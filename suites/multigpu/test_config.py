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
    seen = []

    class Fake:
        def __init__(self, **kw):
            seen.append(kw)

        def set_scheme(self, s):
            pass

    monkeypatch.setattr("harness.lmeval.adapter.MoEEmuLM", Fake)
    s = Session()
    s.lm("tiny-moe", _cfg(tmp_path, "  parallelize: true\n"), "nvfp4")
    s.lm("tiny-moe", _cfg(tmp_path, ""), "nvfp4")
    assert [kw.get("parallelize") for kw in seen] == [True, None]
