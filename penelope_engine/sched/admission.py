"""Admission of one request: match, lock, allocate, load or recompute, and its usage.

Page table of an admitted request (page = position // page_size):

    |-- device hit --|-- hole / host / store --|-- device hit --|-- new --|
      tree pages       own pages, loaded or      tree pages       own pages
                       recomputed

Pages past the tree's match may still be in a shared store (a session that
moved here, or a replica that restarted): the run found there is loaded too.
For each tier (host, then store) one decision covers the request's whole span
in that tier: load it, or recompute it, whichever the planner finds cheaper.
Pages that fail to load are recomputed. Device pages are allocated only when
all of them can be had, so a request that does not fit evicts nothing.

A request's life against the cache is three calls (`RequestLife`, over the cache
and the sessions book), each keeping free + cached == total itself:
`begin_request` (match, pin, allocate: all or
nothing), `cache_computed` after the prefill (`insert_path`: the computed pages
join the tree and the lock moves to their leaf), and `release_request` at the end
(`release`: the lock, the path written through to the host when asked, the pages
the request still owns).

Usage: tokens whose page the session had cached before (its longest inserted
path, `SessionInfo.seen_hashes`) and must compute again are `recomputed`; the
rest of what it computes is `new`. The miss ledger (`sched.ledger`) splits the
computed tokens by why they missed (`TokenUsage.misses`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.request_life import RequestLife
from penelope_engine.cache.tier import Tier
from penelope_engine.protocol import TokenUsage
from penelope_engine.sched.ledger import miss_tokens
from penelope_engine.sched.sequence import Sequence
from penelope_engine.tiers.contract import SchedulerTiers
from penelope_engine.tiers.planner import PlannerCost, choose
from penelope_engine.util import cdiv


def admit(
    seq: Sequence, life: RequestLife, tiers: SchedulerTiers, cost: PlannerCost, now: float
) -> TokenUsage | None:
    """Admit `seq` (its page table, lock, todo and ready time); None when it does not fit now."""
    cache, sessions = life.cache, life.sessions
    ps = cache.page_size
    n_ctx = len(seq.tokens)  # the prompt, plus generated tokens after a preemption
    n_pages = cdiv(n_ctx, ps)
    usable = (n_ctx - 1) // ps  # always leave the last token to compute
    tiers.begin()
    claim = life.begin_request(seq.req.engine_session_id, seq.hashes[:usable], n_pages)
    if claim is None:
        return None
    match, lock, fresh = claim.match, claim.lock, claim.fresh
    beyond = tiers.store_run(seq.hashes[match.num_pages : usable], seq.req.tenant)
    k = match.num_pages + beyond
    where = np.concatenate([match.where, np.full(beyond, Tier.STORE, np.int8)])
    host = np.concatenate([match.host, np.full(beyond, -1, np.int32)])
    device = where == Tier.DEVICE
    m = match.num_pages
    table = np.empty(n_pages, dtype=np.int32)
    table[:m][device[:m]] = match.device[device[:m]]
    owned = np.ones(n_pages, dtype=bool)
    owned[:k][device] = False
    table[owned] = fresh
    seq.page_table, seq.owned, seq.lock = table, owned, lock
    recompute = np.zeros(n_pages, dtype=bool)
    recompute[:k] = where == Tier.HOLE
    recompute[k:] = True
    loaded, chosen = _load(seq, tiers, cost, ps, host, where, recompute)
    pages = np.flatnonzero(recompute)
    pos = (pages[:, None] * ps + np.arange(ps)[None, :]).reshape(-1)
    seq.todo = pos[pos < n_ctx].astype(np.int64)
    seq.cursor = 0
    seq.ready_at = tiers.ready_at(now)
    if seq.admitted_at is None:
        seq.admitted_at = now
    info = sessions.record(seq.req.engine_session_id)
    usage = _usage(seq, info.seen_hashes, ps, int(device.sum()), loaded)
    misses = miss_tokens(seq, cache, info, where, chosen, usable)
    sessions.set_tenant(seq.req.engine_session_id, seq.req.tenant)  # the ledger read the last one
    return replace(usage, misses=misses)


def _load(
    seq: Sequence,
    tiers: SchedulerTiers,
    cost: PlannerCost,
    ps: int,
    host: np.ndarray,
    where: np.ndarray,
    recompute: np.ndarray,
) -> tuple[dict[Tier, int], set[Tier]]:
    """Load the host and store pages the planner picks; mark the rest for recompute.
    Returns the pages loaded per tier, and the tiers the planner chose to recompute."""
    loaded = {Tier.HOST: 0, Tier.STORE: 0}
    chosen: set[Tier] = set()
    for tier in (Tier.HOST, Tier.STORE):
        idx = np.flatnonzero(where == tier)
        if not len(idx):
            continue
        if choose(cost, tier, int(idx[0]) * ps, len(idx) * ps) == "recompute":
            recompute[idx] = True
            chosen.add(tier)
            continue
        if tier == Tier.HOST:
            ok = np.full(len(idx), tiers.host_to_device(host[idx], seq.page_table[idx]))
        else:
            toks = seq.token_array(len(seq.hashes) * ps).reshape(-1, ps)
            ok = tiers.load_store(seq.hashes[idx], toks[idx], seq.req.tenant, seq.page_table[idx])
        recompute[idx[~ok]] = True
        loaded[tier] = int(ok.sum())
    return loaded, chosen


def _usage(
    seq: Sequence, seen: np.ndarray, ps: int, device_pages: int, loaded: dict[Tier, int]
) -> TokenUsage:
    n = min(len(seen), len(seq.hashes))
    was_cached = np.zeros(len(seq.page_table), dtype=bool)
    was_cached[:n] = seen[:n] == seq.hashes[:n]
    recomputed = int(was_cached[seq.todo // ps].sum())
    return TokenUsage(
        prompt_tokens=seq.prompt_len,
        device_tokens=device_pages * ps,
        host_tokens=loaded[Tier.HOST] * ps,
        store_tokens=loaded[Tier.STORE] * ps,
        recomputed_tokens=recomputed,
        new_tokens=len(seq.todo) - recomputed,
    )


def insert_path(seq: Sequence, life: RequestLife, hasher: PageHasher, computed: int) -> None:
    """Insert the request's first `computed` tokens' full pages; lock its new leaf."""
    ps = life.cache.page_size
    n = computed // ps
    if n == 0:
        return
    tokens = seq.token_array(n * ps)
    hashes = (
        seq.hashes[:n]
        if n <= len(seq.hashes)
        else hasher.hashes(tokens, seq.req.tenant, seq.public_pages)
    )
    seq.page_table[:n], seq.lock = life.cache_computed(
        hashes, seq.page_table[:n], seq.req.engine_session_id, seq.req.tenant,
        tokens.reshape(n, ps), seq.lock,
    )  # fmt: skip
    seq.owned[:n] = False


def release(seq: Sequence, life: RequestLife, write_through: bool) -> None:
    """The request lets go of its lock and of the device pages it still owns
    (`RequestLife.release_request`)."""
    life.release_request(seq.lock, seq.page_table[seq.owned], write_through)
    seq.lock = None
    seq.owned[:] = False
