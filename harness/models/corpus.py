"""The tiny model's domain: multi-digit addition, generated from a seed.

One *item* is a pair (a, b) with 0 <= a, b < 10**DIGITS, written as the line
"a+b=c\n". A seeded set of pairs is held out: those pairs (and their swapped
twins b+a) never appear in the training stream, and every task item is drawn
from them. Addition is a good probe for quantization: each answer digit
depends on a carry chain, so small logit perturbations flip digits, and the
per-token distributions on the answer digits are sharp, so KL moves.

Everything here is a pure function of the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DIGITS = 3
DEFAULT_SEED = 20261129
N_HELDOUT = 8000
TASK_ITEMS = 600          # items per task file (>= 500 required)
ROLLING_LINES = 8         # equations per rolling document
WORKED_TEST = 150         # items of the gsm8k-style stand-in task (worked_items)
WORKED_FEWSHOT = 50       # its few-shot pool (lm-eval's fewshot_split "train")


def line(a: int, b: int) -> str:
    return f"{a}+{b}={a + b}\n"


def prompt(a: int, b: int) -> str:
    return f"{a}+{b}="


@dataclass(frozen=True)
class Split:
    heldout: tuple[tuple[int, int], ...]
    excluded: frozenset  # heldout pairs and their swapped twins

    def allowed(self, a: int, b: int) -> bool:
        return (a, b) not in self.excluded


def make_split(seed: int = DEFAULT_SEED, n_heldout: int = N_HELDOUT, digits: int = DIGITS) -> Split:
    rng = random.Random(f"heldout:{seed}")
    hi = 10 ** digits
    seen: set = set()
    pairs: list = []
    while len(pairs) < n_heldout:
        a, b = rng.randrange(hi), rng.randrange(hi)
        if (a, b) in seen or (b, a) in seen:
            continue
        seen.add((a, b))
        pairs.append((a, b))
    excluded = frozenset(seen | {(b, a) for a, b in seen})
    return Split(tuple(pairs), excluded)


def training_lines(rng: random.Random, split: Split, n: int, digits: int = DIGITS) -> list[str]:
    """n training equations, never a held-out pair. Operand lengths are mixed
    (uniform over the number of digits) so short sums are seen as often as long."""
    out = []
    while len(out) < n:
        a = _operand(rng, digits)
        b = _operand(rng, digits)
        if split.allowed(a, b):
            out.append(line(a, b))
    return out


def _operand(rng: random.Random, digits: int) -> int:
    nd = rng.randint(1, digits)
    return rng.randrange(10 ** nd) if nd == 1 else rng.randrange(10 ** (nd - 1), 10 ** nd)


def _distractors(rng: random.Random, answer: int, k: int = 3) -> list[int]:
    cands = [answer + d for d in (1, -1, 10, -10, 100, -100, 2, -2, 11, -11)]
    cands = [c for c in dict.fromkeys(cands) if c >= 0 and c != answer]
    rng.shuffle(cands)
    return cands[:k]


def task_items(seed: int = DEFAULT_SEED, n: int = TASK_ITEMS) -> dict[str, list[dict]]:
    """The three task files' rows, from disjoint slices of the held-out pairs."""
    split = make_split(seed)
    pairs = list(split.heldout)
    rng = random.Random(f"tasks:{seed}")
    mc_pairs, gen_pairs = pairs[:n], pairs[n:2 * n]
    roll_pairs = pairs[2 * n:2 * n + n * ROLLING_LINES]
    if len(roll_pairs) < n * ROLLING_LINES:
        raise ValueError("not enough held-out pairs for the rolling task")
    mc = []
    for i, (a, b) in enumerate(mc_pairs):
        answer = a + b
        choices = [answer] + _distractors(rng, answer)
        rng.shuffle(choices)
        # choices end with the newline so a shorter choice is never a prefix of the sum
        mc.append({"id": i, "question": prompt(a, b), "choices": [f"{c}\n" for c in choices],
                   "label": choices.index(answer)})
    gen = [{"id": i, "question": prompt(a, b), "answer": str(a + b)} for i, (a, b) in enumerate(gen_pairs)]
    rolling = []
    for i in range(n):
        chunk = roll_pairs[i * ROLLING_LINES:(i + 1) * ROLLING_LINES]
        rolling.append({"id": i, "text": "".join(line(a, b) for a, b in chunk)})
    return {"mc": mc, "gen": gen, "rolling": rolling}


def worked_answer(a: int, b: int) -> str:
    """gsm8k's answer layout on an addition: the worked line (the prompt's
    equation completed) and the final line '#### <number>'."""
    return f"{a + b}\n#### {a + b}"


def worked_items(seed: int = DEFAULT_SEED, n_test: int = WORKED_TEST,
                 n_fewshot: int = WORKED_FEWSHOT) -> dict[str, list[dict]]:
    """Rows of the gsm8k-style stand-in task: {"train": few-shot pool, "test": items},
    each {"id", "question": "a+b=", "answer": worked_answer(a, b)}, from held-out
    pairs no other task uses (after the slices task_items takes)."""
    pairs = list(make_split(seed).heldout)
    start = 2 * TASK_ITEMS + TASK_ITEMS * ROLLING_LINES
    chosen = pairs[start:start + n_fewshot + n_test]
    if len(chosen) < n_fewshot + n_test:
        raise ValueError("not enough held-out pairs for the worked-answer task")
    rows = [{"id": i, "question": prompt(a, b), "answer": worked_answer(a, b)} for i, (a, b) in enumerate(chosen)]
    train = rows[:n_fewshot]
    test = [dict(r, id=i) for i, r in enumerate(rows[n_fewshot:])]
    return {"train": train, "test": test}


def calibration_texts(seed: int = DEFAULT_SEED, n_docs: int = 64) -> list[str]:
    """The documented calibration set: training-distribution documents (never
    held-out pairs), from their own seed stream."""
    split = make_split(seed)
    rng = random.Random(f"calibration:{seed}")
    return ["".join(training_lines(rng, split, ROLLING_LINES)) for _ in range(n_docs)]
