"""The bundled model, tokenizer and tasks: offline, small, held out, good."""

import json
import random

from harness.lmeval import tasks
from harness.models import corpus
from harness.models import tiny_model
from harness.models import tokenizer as tok

MODEL = tiny_model.bundled_dir()


def test_bundled_model_is_small_and_complete():
    files = {p.name for p in MODEL.iterdir()}
    assert "__init__.py" in files  # a package, so setuptools ships the files as package data
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    size = sum(p.stat().st_size for p in MODEL.iterdir() if p.is_file())
    assert size <= 10 * 1024 * 1024, size
    cfg = json.loads((MODEL / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_moe" and cfg.get("num_experts", cfg.get("num_local_experts")) == 8 and cfg["num_experts_per_tok"] == 2
    for k in ("hidden_size", "moe_intermediate_size"):
        assert cfg[k] % 32 == 0 and cfg[k] % 16 == 0


def test_tokenizer_loads_offline_with_autotokenizer():
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(MODEL), local_files_only=True)
    text = "123+456=579\n"
    ids = t.encode(text, add_special_tokens=False)
    assert len(ids) == len(text) and t.decode(ids) == text
    assert t.eos_token == tok.EOS and t.pad_token == tok.PAD


def test_task_files_are_what_the_generator_makes():
    rendered = tasks.render()
    for fname, text in rendered.items():
        assert (tasks.TASKS_DIR / fname).read_text() == text, f"{fname} is stale: python -m harness.lmeval.tasks"


def test_tasks_have_enough_heldout_items_never_in_training():
    split = corpus.make_split()
    rng = random.Random(0)
    train = set(corpus.training_lines(rng, split, 20000))
    for task in tasks.TINY_TASKS:
        rows = tasks.read_rows(task)
        assert len(rows) >= 500, task
        for r in rows:
            text = r.get("question") or r["text"]
            for line in text.strip("\n").split("\n"):
                a, rest = line.split("+")
                b = rest.split("=")[0]
                assert not split.allowed(int(a), int(b)), (task, line)
                assert f"{int(a)}+{int(b)}={int(a) + int(b)}\n" not in train
    mc = tasks.read_rows("tiny_add_mc")
    assert all(r["choices"][r["label"]] == f"{eval(r['question'][:-1])}\n" for r in mc)
    assert all(len(set(r["choices"])) == 4 for r in mc)


def test_standin_items_are_heldout_worked_answers_no_other_task_uses():
    """tiny_add_gsm: a 50-item few-shot pool and 150 items, every one a held-out
    pair in the model's alphabet, answered gsm8k-style ('c\\n#### c')."""
    split = corpus.make_split()
    train, test = (tasks.read_rows(tasks.STANDIN_TASK, split=s) for s in ("train", "test"))
    assert (len(train), len(test)) == (50, 150)
    others = {r["question"] for t in ("tiny_add_gen", "tiny_add_mc") for r in tasks.read_rows(t)}
    seen = set()
    for r in train + test:
        a, b = (int(x) for x in r["question"].rstrip("=").split("+"))
        assert r["question"] == f"{a}+{b}=" and r["answer"] == f"{a + b}\n#### {a + b}"
        assert not split.allowed(a, b) and r["question"] not in others and r["question"] not in seen
        assert set(r["question"]) <= set(tok.ALPHABET)
        seen.add(r["question"])


def test_task_yaml_registers_with_task_manager():
    tm = tasks.task_manager()
    for t in tasks.TINY_TASKS:
        assert t in tm.all_tasks


def test_training_is_deterministic(tmp_path):
    """Same seed, same steps, same threads -> bit-identical weights (a short run)."""
    from harness.models.train import train

    a = train(tmp_path / "a", steps=6, batch=4, seq_len=32, quiet=True)
    b = train(tmp_path / "b", steps=6, batch=4, seq_len=32, quiet=True)
    assert a["final_loss"] == b["final_loss"]
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    train(tmp_path / "c", seed=1, steps=6, batch=4, seq_len=32, quiet=True)
    assert (tmp_path / "c" / "model.safetensors").read_bytes() != (tmp_path / "a" / "model.safetensors").read_bytes()
