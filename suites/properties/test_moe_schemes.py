"""The scheme table (harness/moe/schemes.py) is the one list of schemes: every
other list (the torch-free names lm-eval configs are validated against, and
through them the tiny accuracy configs; the docs) equals it. buildkite/nightly.yml is generated
from it (suites/pipelines/test_nightly_generated.py)."""
import re
from pathlib import Path

import pytest

from harness.lmeval import schemes as lmeval_schemes
from harness.moe.schemes import SCHEME_NAMES

REPO = Path(__file__).resolve().parents[2]
NAME = r"\b(?:bf16|nvfp4|w_[a-z0-9_]+)\b"


def test_lmeval_names_are_the_table():
    # lmeval/schemes.py stays importable without torch (eval --dry-run), so it
    # cannot import the table: it is held equal to it here.
    assert lmeval_schemes.SCHEMES == ("bf16", *SCHEME_NAMES)
    assert lmeval_schemes.QUANTIZED_SCHEMES == SCHEME_NAMES


def _listed(doc: str, start: str, end: str) -> list:
    text = (REPO / doc).read_text()
    i = text.index(start)
    j = text.index(end, i)
    return re.findall(NAME, text[i + len(start):j])


@pytest.mark.parametrize("doc,start,end,baseline", [
    ("docs/moe-api.md", "hm.SCHEME_NAMES = (", ")", False),
    ("docs/internal-api.md", "Names:", "weight only)", False),
    ("docs/lm_eval.md", "- Schemes:", "weight only)", True),
])
def test_docs_list_the_table(doc, start, end, baseline):
    want = (["bf16"] if baseline else []) + list(SCHEME_NAMES)
    assert _listed(doc, start, end) == want, f"{doc}: scheme list differs from harness/moe/schemes.py"
