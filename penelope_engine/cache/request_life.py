"""A request's life against the cache, in three calls (`PrefixCache` has them).

    begin_request    match, pin the matched path, allocate the rest: all or nothing
    cache_computed   the computed pages join the tree; the request's lock moves to them
    release_request  the lock (the path written through first, when asked) and the
                     device pages the request still owns

Free + cached == total holds across the three however a request ends (finished,
aborted, preempted): each keeps the locks and the pages it moves together, so the
scheduler never orders the cache's smaller calls itself (as SGLang's
`cache_unfinished_req` / `cache_finished_req`). They use only the cache's own
public calls (`_Cache`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node, TreeMatch
from penelope_engine.errors import CapacityError


@dataclass(frozen=True)
class LockHandle:
    node: Node | None


@dataclass(frozen=True)
class InsertResult:
    pages: np.ndarray  # canonical device page of each inserted page
    leaf: Node


@dataclass(frozen=True)
class Claim:
    """What `begin_request` gave a request: where its matched pages are, the lock on
    them, and the device pages allocated for the rest."""

    match: TreeMatch
    lock: LockHandle
    fresh: np.ndarray


class _Cache(Protocol):
    """The `PrefixCache` calls the three use."""

    def match(self, hashes: np.ndarray) -> TreeMatch: ...
    def lock(self, node: Node | None) -> LockHandle: ...
    def lock_match(self, match: TreeMatch) -> LockHandle: ...
    def unlock(self, handle: LockHandle) -> None: ...
    def can_allocate(self, n: int) -> bool: ...
    def allocate(self, n: int) -> np.ndarray: ...
    def free(self, pages: np.ndarray) -> None: ...
    def on_start(self, sid: str) -> None: ...
    def write_through(self, leaf: Node) -> int: ...
    def insert(
        self,
        hashes: np.ndarray,
        pages: np.ndarray,
        session: str,
        tenant: str = "default",
        tokens: np.ndarray | None = None,
    ) -> InsertResult: ...


class RequestLife:
    """The three calls, mixed into `PrefixCache`."""

    def begin_request(self: _Cache, sid: str, hashes: np.ndarray, n_pages: int) -> Claim | None:
        """Match `hashes`, pin the matched path, and allocate the device pages of the
        request's `n_pages` the match does not hold on the device: all or nothing (mutates).
        None when they cannot be had now, having changed nothing. The session has started."""
        match = self.match(hashes)
        lock = self.lock_match(match)
        need = n_pages - int((match.where == Tier.DEVICE).sum())
        try:
            fresh = self.allocate(need) if self.can_allocate(need) else None
        except CapacityError:
            fresh = None
        if fresh is None:
            self.unlock(lock)
            return None
        self.on_start(sid)
        return Claim(match, lock, fresh)

    def cache_computed(
        self: _Cache,
        hashes: np.ndarray,
        pages: np.ndarray,
        sid: str,
        tenant: str,
        tokens: np.ndarray,
        lock: LockHandle | None,
    ) -> tuple[np.ndarray, LockHandle]:
        """A running request's computed pages join the tree (`insert`), and its lock moves
        from `lock` to their leaf (mutates). Returns the canonical pages and the new lock."""
        res = self.insert(hashes, pages, sid, tenant, tokens)
        new = self.lock(res.leaf)
        if lock is not None:
            self.unlock(lock)
        return res.pages, new

    def release_request(
        self: _Cache, lock: LockHandle | None, owned: np.ndarray, write_through: bool
    ) -> None:
        """A request lets go (finished, aborted or preempted): its lock, its path written
        through to the host first when asked, and the device pages it still owns, which
        no tree node holds (mutates)."""
        if lock is not None:
            self.unlock(lock)
            leaf = lock.node
            if write_through and leaf is not None and leaf.parent is not None:
                self.write_through(leaf)
        self.free(owned)
