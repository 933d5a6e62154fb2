"""The tiny random family models (harness/models/tiny_families.py) and their
accuracy configs: every tiny-<model_type>-<scheme>.yaml runs through the code
path of `moe-harness eval` (evaluate.run_config) and passes, its certified
oracle at KL exactly 0 with no element outside its bound; the models are made
the same, byte for byte, from the same seed."""

import pytest
import torch

from harness.lmeval import configs
from harness.lmeval.config import load, resolve_model_dir
from harness.lmeval.evaluate import Session, run_config
from harness.models import tiny_family_make, tiny_families

pytestmark = pytest.mark.usefixtures("one_thread")

PATHS = configs.tiny_family_config_paths()


def test_configs_follow_the_table():
    assert len(PATHS) == 7 and all(p.is_file() for p in PATHS), [p for p in PATHS if not p.is_file()]
    shipped = sorted(p.name for p in configs.CONFIG_DIR.glob("tiny-*-*.yaml"))
    assert shipped == sorted(p.name for p in PATHS)
    for path in PATHS:
        cfg = load(path)
        family, scheme = path.stem[len("tiny-"):].rsplit("-", 1)
        assert cfg.model_name == f"tiny-{family}" and cfg.scheme == scheme, path.name
        # random weights: no accuracy gates, the KL gates only, the oracle's at 0
        assert not cfg.one_sided and cfg.paired is None, path.name
        assert cfg.kl.max is not None and cfg.kl.oracle and cfg.kl.oracle_max == 0.0, path.name
        assert resolve_model_dir(cfg) == str(tiny_families.folder(cfg.model_name))


def test_same_seed_same_model():
    for name in tiny_families.MODEL_NAMES:
        a, b = tiny_family_make.build_model(name).state_dict(), tiny_family_make.build_model(name).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


@pytest.fixture(scope="module")
def family_session():
    return Session(disable_tqdm=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_tiny_family_config_passes_with_the_oracle_at_zero(path, family_session):
    r = run_config(load(path), session=family_session)
    assert not r["skipped"], r["message"]
    oracle = r["details"]["kl_oracle"]
    cert = oracle["certification"]
    assert oracle["mean_kl"] == 0.0 and cert["outside"] == 0 and cert["elements"] > 0, (path.name, oracle)
    assert r["details"]["kl"]["mean_kl"] > 0, path.name  # the scheme does quantize something
    assert r["passed"], (path.name, r["message"])
