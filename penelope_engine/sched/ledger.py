"""The miss ledger: why each computed prompt token was not a cache hit. No torch.

At admission every page of the prompt the request computes (`Sequence.todo`)
gets exactly one cause, so the causes sum to the computed tokens (recomputed
+ new) exactly. What the engine knows decides it, page by page:

* found in the tree or the store but computed:
  - a hole (it left every tier): `dropped_host` with a host tier (a page
    leaving the device goes to the host first, so the host dropped it),
    `evicted_device` without one;
  - on the host or in the store: `recompute_cheaper` when the planner chose
    to recompute the span, else its load failed: `store_miss` (the store's
    read), `dropped_host` (the host's copy);
* not found anywhere, but the session's last path had this page:
  `store_miss` with a store (it was written behind or spilled, and is gone),
  else as a hole;
* not found, and the session's last path differs here: `tenant` when the
  session's last request came from another tenant (pages are namespaced by
  tenant: none is shared), else `prompt_edit` (the prompt left the session's
  last one at token `Sequence.prompt_edit_at`, a page boundary);
* not found, and the session has no path here: `moved_replica` when the
  caller says the prompt continues earlier turns (`GenerateRequest.has_history`:
  they ran on another replica, or this replica forgot the session after
  `session_ttl_s`), else `new`;
* past the prompt's full pages (its partial last page), and the last full page
  of a prompt that fills it exactly (the last token is always computed): `new`.

`parent_session` (a sub-agent) makes the parent's path the session's own
(`sched.hinted`), so it is classified as above.
"""

from __future__ import annotations

import numpy as np

from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.tier import Tier
from penelope_engine.protocol import MISS_CAUSES, MissTokens
from penelope_engine.sched.sequence import Sequence

CODE = {cause: i for i, cause in enumerate(MISS_CAUSES)}


def miss_tokens(
    seq: Sequence,
    cache: PrefixCache,
    info: SessionInfo,
    where: np.ndarray,
    recompute_chosen: set[Tier],
    usable: int,
) -> MissTokens:
    """The computed tokens of `seq`'s admission by cause; sets `seq.prompt_edit_at`.

    `info`: the session's record, as it was before this admission;
    `where`: each found page's tier (the tree's match, then the store's run);
    `recompute_chosen`: tiers whose span the planner chose to recompute;
    `usable`: full pages the match looked at (the last token is always computed).
    """
    ps = cache.page_size
    n_pages = len(seq.page_table)
    per_page = np.bincount(seq.todo // ps, minlength=n_pages)
    seen = info.seen_hashes
    hashes = seq.hashes[:usable]
    hole = CODE["dropped_host"] if cache.has_host else CODE["evicted_device"]
    cause = np.full(n_pages, CODE["new"], dtype=np.int8)
    k = len(where)
    found = cause[:k]
    found[where == Tier.HOLE] = hole
    for tier, failed in ((Tier.HOST, "dropped_host"), (Tier.STORE, "store_miss")):
        chosen = tier in recompute_chosen
        found[where == tier] = CODE["recompute_cheaper" if chosen else failed]
    rest = np.arange(k, usable)
    n = min(len(seen), usable)
    same = np.zeros(usable, dtype=bool)
    same[:n] = seen[:n] == hashes[:n]
    other_tenant = info.tenant is not None and info.tenant != seq.req.tenant
    if rest.size:
        had = rest < n
        kept = same[rest]
        cause[rest[had & kept]] = CODE["store_miss"] if cache.has_store else hole
        cause[rest[had & ~kept]] = CODE["tenant" if other_tenant else "prompt_edit"]
        if not len(seen) and seq.req.has_history and seq.req.session_id is not None:
            cause[rest] = CODE["moved_replica"]
    diverged = np.flatnonzero(~same[:n])
    if len(diverged) and not other_tenant:
        seq.prompt_edit_at = int(diverged[0]) * ps
    by_cause = np.bincount(cause, weights=per_page, minlength=len(MISS_CAUSES))
    return MissTokens(*(int(x) for x in by_cause))
