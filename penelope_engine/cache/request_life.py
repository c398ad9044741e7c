"""A request's life against the cache, in three calls (`RequestLife`, over the cache).

    begin_request    match, pin the matched path, allocate the rest: all or nothing
    cache_computed   the computed pages join the tree; the request's lock moves to them
    release_request  the lock (the path written through first, when asked) and the
                     device pages the request still owns

Free + cached == total holds across the three however a request ends (finished,
aborted, preempted): each keeps the locks and the pages it moves together, so the
scheduler never orders the cache's smaller calls itself (as SGLang's
`cache_unfinished_req` / `cache_finished_req`). They use only the cache's public
face and the sessions book (a request that starts starts its session).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from penelope_engine.cache.prefix_cache import LockHandle, PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import TreeMatch
from penelope_engine.errors import CapacityError


@dataclass(frozen=True)
class Claim:
    """What `begin_request` gave a request: where its matched pages are, the lock on
    them, and the device pages allocated for the rest."""

    match: TreeMatch
    lock: LockHandle
    fresh: np.ndarray


class RequestLife:
    """The three calls of a request, over the cache and the sessions book."""

    def __init__(self, cache: PrefixCache, sessions: Sessions) -> None:
        self.cache = cache
        self.sessions = sessions

    def begin_request(self, session_id: str, hashes: np.ndarray, n_pages: int) -> Claim | None:
        """Match `hashes`, pin the matched path, and allocate the device pages of the
        request's `n_pages` the match does not hold on the device: all or nothing (mutates).
        None when they cannot be had now, having changed nothing. The session has started."""
        cache = self.cache
        match = cache.match(hashes)
        lock = cache.lock_match(match)
        need = n_pages - int((match.where == Tier.DEVICE).sum())
        try:
            fresh = cache.allocate(need) if cache.can_allocate(need) else None
        except CapacityError:
            fresh = None
        if fresh is None:
            cache.unlock(lock)
            return None
        self.sessions.on_start(session_id)
        return Claim(match, lock, fresh)

    def cache_computed(
        self,
        hashes: np.ndarray,
        pages: np.ndarray,
        session_id: str,
        tenant: str,
        tokens: np.ndarray,
        lock: LockHandle | None,
    ) -> tuple[np.ndarray, LockHandle]:
        """A running request's computed pages join the tree (`insert`), and its lock moves
        from `lock` to their leaf (mutates). Returns the canonical pages and the new lock."""
        res = self.cache.insert(hashes, pages, session_id, tenant, tokens)
        new = self.cache.lock(res.leaf)
        if lock is not None:
            self.cache.unlock(lock)
        return res.pages, new

    def release_request(
        self, lock: LockHandle | None, owned: np.ndarray, write_through: bool
    ) -> None:
        """A request lets go (finished, aborted or preempted): its lock, its path written
        through to the host first when asked, and the device pages it still owns, which
        no tree node holds (mutates)."""
        if lock is not None:
            self.cache.unlock(lock)
            leaf = lock.node
            if write_through and leaf is not None and leaf.parent is not None:
                self.cache.write_through(leaf)
        self.cache.free(owned)
