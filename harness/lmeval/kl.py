"""Per-token KL divergence between the baseline's and the scheme's next-token
distributions on the rolling task's documents.

Both distributions come from the same loaded model (MoEEmuLM.set_scheme), on
the same disjoint rolling windows lm-eval scores, batch by batch, so nothing
of vocabulary size is ever stored for more than one batch.
KL(P_base || P_scheme) = sum_v p_base(v) (log p_base(v) - log p_scheme(v)),
averaged over every predicted token.
"""

from __future__ import annotations

import hashlib

import torch
from tqdm import tqdm


# the baseline's log-probs are kept (per loaded model) when they are small, so
# evaluating several schemes or faults against one baseline runs it once
CACHE_LIMIT_ELEMENTS = 50_000_000


@torch.no_grad()
def mean_token_kl(lm, texts: list[str], baseline: str, scheme: str, batch_docs: int = 32,
                  disable_tqdm: bool = False) -> dict:
    rows, spans = [], []
    for text in texts:
        for ctx, cont in lm.rolling_windows(text):
            whole = list(ctx) + list(cont)
            rows.append(whole[:-1])
            spans.append((len(whole) - 1 - len(cont), len(cont)))
    previous = lm.scheme
    vocab = getattr(lm.model.config, "vocab_size", 0) or 0
    n_tokens = sum(len(r) for r in rows)
    cache = getattr(lm, "_kl_baseline_cache", None)
    if cache is None:
        cache = lm._kl_baseline_cache = {}
    key = (baseline, batch_docs, hashlib.sha256(repr(rows).encode()).hexdigest())
    # oracle baselines are not cached: their certification counts come from the run
    cacheable = n_tokens * vocab <= CACHE_LIMIT_ELEMENTS and not baseline.startswith("oracle:")
    total, count, worst = 0.0, 0, 0.0
    per_doc_means = []
    try:
        for start in tqdm(range(0, len(rows), batch_docs), disable=disable_tqdm, desc=f"KL [{scheme} vs {baseline}]"):
            chunk = rows[start:start + batch_docs]
            if cacheable and (key, start) in cache:
                base = cache[(key, start)]
            else:
                lm.set_scheme(baseline)
                base = lm.logprobs(chunk)
                if cacheable:
                    cache[(key, start)] = base
            lm.set_scheme(scheme)
            other = lm.logprobs(chunk)
            for lp_b, lp_s, (first, n) in zip(base, other, spans[start:start + len(chunk)]):
                pb, ps = lp_b[first:first + n], lp_s[first:first + n]
                kl = (pb.exp() * (pb - ps)).sum(-1).clamp(min=0.0)
                total += float(kl.sum())
                count += int(kl.numel())
                worst = max(worst, float(kl.max()))
                per_doc_means.append(float(kl.mean()))
    finally:
        lm.set_scheme(previous)
    return {"mean_kl": total / max(1, count), "n_tokens": count, "max_token_kl": worst,
            "n_docs": len(texts), "per_doc_mean_kl": per_doc_means}
