"""Train the bundled tiny MoE model on CPU, deterministically.

Same seed and thread count -> bit-identical weights (torch deterministic
algorithms on CPU, seeded data stream, fixed step count, no time-based stop).
Writes config.json, model.safetensors, the tokenizer files and
training_meta.json into --out (default: the bundled folder).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

from harness.models import corpus
from harness.models import tiny_model
from harness.models import tokenizer as tok
from harness.util.offline import enter_offline, set_threads

DEFAULTS = dict(steps=3000, batch=32, seq_len=64, lr=3e-3, warmup=100, weight_decay=0.01, threads=1)




def token_stream(seed: int, n_seqs: int, seq_len: int):
    """[n_seqs, seq_len] int64 training sequences; every other one starts with <eos>
    (lm-eval's rolling windows start with the prefix token, prompts do not)."""
    import torch

    ids = tok.vocab()
    eos = ids[tok.EOS]
    split = corpus.make_split(seed)
    rng = random.Random(f"train:{seed}")
    rows = []
    for i in range(n_seqs):
        row = [eos] if i % 2 else []
        while len(row) < seq_len:
            for ch in corpus.training_lines(rng, split, 1)[0]:
                row.append(ids[ch])
        rows.append(row[:seq_len])
    return torch.tensor(rows, dtype=torch.long)


def lr_at(step: int, total: int, base: float, warmup: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def greedy_accuracy(model, items, max_new: int = 6) -> float:
    """Exact-match accuracy of greedy completions (batched, left-padded by length groups)."""
    import torch

    ids = tok.vocab()
    inv = {v: k for k, v in ids.items()}
    nl = ids["\n"]
    correct = 0
    by_len: dict[int, list] = {}
    for it in items:
        by_len.setdefault(len(it["question"]), []).append(it)
    model.eval()
    with torch.no_grad():
        for _, group in sorted(by_len.items()):
            x = torch.tensor([[ids[c] for c in it["question"]] for it in group])
            outs = [[] for _ in group]
            done = torch.zeros(len(group), dtype=torch.bool)
            for _ in range(max_new):
                nxt = model(input_ids=x).logits[:, -1].argmax(-1)
                for j, t in enumerate(nxt.tolist()):
                    if not done[j]:
                        if t == nl:
                            done[j] = True
                        else:
                            outs[j].append(inv.get(t, "?"))
                x = torch.cat([x, nxt[:, None]], dim=1)
            correct += sum("".join(o) == it["answer"] for o, it in zip(outs, group))
    return correct / max(1, len(items))


def train(out, seed=corpus.DEFAULT_SEED, steps=DEFAULTS["steps"], batch=DEFAULTS["batch"],
          seq_len=DEFAULTS["seq_len"], lr=DEFAULTS["lr"], threads=DEFAULTS["threads"], quiet=False) -> dict:
    import torch
    from transformers import Qwen3MoeForCausalLM


    enter_offline()
    set_threads(threads)
    torch.manual_seed(seed)
    random.seed(seed)
    torch.use_deterministic_algorithms(True)

    t0 = time.perf_counter()
    config = tiny_model.make_config(output_router_logits=True)
    model = Qwen3MoeForCausalLM(config).float()
    data = token_stream(seed, steps * batch, seq_len).view(steps, batch, seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=DEFAULTS["weight_decay"])
    model.train()
    losses = []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, DEFAULTS["warmup"])
        x = data[step]
        outp = model(input_ids=x, labels=x)
        opt.zero_grad(set_to_none=True)
        outp.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(outp.loss.detach()))
        if not quiet and (step % 100 == 0 or step == steps - 1):
            print(f"step {step:5d} loss {sum(losses[-100:]) / len(losses[-100:]):.4f} "
                  f"t={time.perf_counter() - t0:.0f}s", flush=True)
    train_s = time.perf_counter() - t0

    items = corpus.task_items(seed)["gen"][:200]
    acc = greedy_accuracy(model, items)
    model.config.output_router_logits = False
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save(out)
    for stray in ("generation_config.json",):
        (out / stray).unlink(missing_ok=True)
    meta = {
        "seed": seed, "steps": steps, "batch": batch, "seq_len": seq_len, "lr": lr, "threads": threads,
        "final_loss": sum(losses[-50:]) / len(losses[-50:]), "train_seconds": round(train_s, 1),
        "greedy_accuracy_heldout_200": acc, "torch": torch.__version__,
        "params": sum(p.numel() for p in model.parameters()),
        "corpus": {"digits": corpus.DIGITS, "heldout_pairs": corpus.N_HELDOUT},
    }
    (out / "training_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta
