"""Group limit skipped (DeepSeek grouped_topk / noaux_tc): with n_group > 1
every selected expert must lie in one of the topk_group best groups (ranked by
the sum of their two best biased scores with a correction bias, else by their
best score; equal group scores to the lowest group index). A layer that takes
the global top-k ignores the limit wherever it binds."""
from __future__ import annotations

import torch

from harness.moe import reference as ref

from harness.testing.checks.oracle import layer_route


def check_group_limit(problem, t=None):
    """Every expert the layer selects is in a kept group of the reference, and
    the selection equals the reference's. Returns how many tokens the limit
    binds (the global top-k leaves the kept groups): 0 makes the check vacuous
    for this problem."""
    if t is None:
        t = problem.tensors()
    arch = problem.arch
    assert arch.grouped, "this check needs a grouped problem (n_group > 1)"
    keys = ref.reference_keys(t.router_logits, arch.scoring, t.e_score_correction_bias)
    ids_ref, eligible = ref.reference_select(keys, arch)
    ids_global, _ = ref.reference_select(keys, arch.replace(n_group=1, topk_group=1))
    binds = int((~torch.gather(eligible, 1, ids_global)).any(-1).sum())
    _, ids = layer_route(problem, t)
    ids = ids.cpu().long()
    outside = ~torch.gather(eligible, 1, ids)
    if bool(outside.any()):
        tok = int(torch.nonzero(outside.any(-1))[0])
        E, G = problem.E, arch.n_group
        gsz = E // G
        kept = sorted({e // gsz for e in torch.nonzero(eligible[tok]).flatten().tolist()})
        raise AssertionError(
            f"group limit skipped: token {tok} selects experts {ids[tok].tolist()} (groups "
            f"{[e // gsz for e in ids[tok].tolist()]}) but only groups {kept} are among the topk_group="
            f"{arch.topk_group} best of n_group={G} ({int(outside.any(-1).sum())} tokens select outside their "
            f"kept groups; the global top-k would be {ids_global[tok].tolist()})")
    if not torch.equal(ids, ids_ref):
        bad = torch.nonzero((ids != ids_ref).any(-1)).flatten()[:2].tolist()
        raise AssertionError(f"grouped selection differs from the reference in tokens {bad}: layer "
                             f"{ids[bad].tolist()} vs reference {ids_ref[bad].tolist()}")
    return {"binds": binds}
