"""Penelope's eviction over SGLang's tree, with or without HiCache's host tier.

Order (`sessions.SessionBook.victim_key`, `policy`): private pages before
shared ones; among private histories the one least likely to return soon
first (ended sessions, then one-shot requests, then sessions by expected
return); within a history its lowest positions first. Retained sessions are
skipped (their node is locked, see `radix_cache`).

Taking device pages from a history's front:

    device front ──> host span    when a host tier is attached and has room
                 └─> dropped      otherwise (the hole grows over it, and over
                                  the history's host span, so one hole remains)

Host room is made, in the same order, by dropping the host front of a history
*colder* than the victim, then by SGLang's own host eviction (`evict_host`,
its host-only tree nodes); a warmer history's host pages are never dropped
for a colder one's device pages.

A private chain taken out of the tree becomes a shelf record (`shelf`):
everything of it still cached leaves SGLang's tree, whose nodes may not sit
below a hole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from penelope_sglang.contract import PenelopeTree
from penelope_sglang.policy import PrivateChain, coldest_session, private_chains
from penelope_sglang.results import key_namespace, key_tokens
from penelope_sglang.shelf import ShelvedSuffix
from penelope_sglang.support import FULL, path_above


class Evictor:
    """Frees private device pages of one `PenelopeRadixCache` in Penelope's order."""

    def __init__(self, cache: PenelopeTree, clock: Callable[[], float] = time.monotonic):
        self.cache = cache
        self.clock = clock

    def evict_private(self, need: int, done: Callable[[int], bool]) -> int:
        """Free device pages until `done(freed)`; returns the device tokens freed."""
        cache = self.cache
        freed = 0
        while not done(freed):
            now = self.clock()
            cache.pins.release_expired(now)
            victim = self._victim(now)
            if victim is None:
                break
            want = max(need - freed, 1)
            if isinstance(victim, PrivateChain):
                record = self._take_out_of_tree(victim)
                freed += self._take_front(record, want, now)
                if record.suffix_len > 0:
                    cache.shelf.add(record)
            else:
                freed += self._take_front(victim, want, now)
        return freed

    def victim_key(self, candidate: PrivateChain | ShelvedSuffix, now: float) -> Any:
        return self.cache.book.victim_key(self._session(candidate), candidate.last_access, now)

    def _session(self, candidate: PrivateChain | ShelvedSuffix) -> str | None:
        if isinstance(candidate, PrivateChain):
            return self.cache.book.session_of_node(candidate.nodes[-1].id)
        return candidate.session

    def _victim(self, now: float) -> PrivateChain | ShelvedSuffix | None:
        cache = self.cache
        anchors = cache.shelf.anchors() | cache.shared_ids
        chains = private_chains(cache.tree_core.evictable_device_leaves, anchors)
        book = cache.book
        chains = [c for c in chains if not book.is_retained(self._session(c), now)]
        records = [r for r in cache.shelf.records() if not book.is_retained(r.session, now)]
        return coldest_session(chains, records, key=lambda c: self.victim_key(c, now))

    def _take_out_of_tree(self, chain: PrivateChain) -> ShelvedSuffix:
        """Remove a private chain from the tree, keeping its device slots in a new record."""
        cache = self.cache
        path = path_above(chain.nodes[0])
        slots: list[torch.Tensor] = []
        for node in chain.nodes:
            path.extend(key_tokens(node.key))
            slots.append(node.component_data[FULL].value)
        parent = chain.nodes[0].parent
        session = self._session(chain)
        for node in reversed(chain.nodes):
            cache.remove_keeping_slots(node.id)
        chain_slots = torch.cat(slots)
        cache.counters.shelved_tokens += len(chain_slots)
        return ShelvedSuffix(
            namespace=key_namespace(chain.nodes[0].key),
            path=path,
            hole_start=chain.hole_start,
            hole_end=chain.hole_start,
            indices=chain_slots,
            last_access=chain.last_access,
            anchor=None if parent.parent is None else parent.id,
            session=session,
        )

    def _take_front(self, record: ShelvedSuffix, want: int, now: float) -> int:
        """Move (or drop) the device front of `record`: whole pages covering `want`."""
        cache = self.cache
        front = cache.shelf.take_device_front(record, want)
        host = cache.host_tier
        if host is not None and self._host_room(len(front), record, now):
            host_slots = host.backup(front)
            if host_slots is not None:
                cache.shelf.extend_host(record, host_slots)
                cache.counters.host_tokens += len(front)
                cache.free_slots(front)
                return len(front)
        dropped_host = cache.shelf.drop_through(record, len(front))
        if host is not None:
            host.free(dropped_host)
        cache.counters.hole_tokens += len(front) + len(dropped_host)
        cache.free_slots(front)
        return len(front)

    def _host_room(self, n: int, victim: ShelvedSuffix, now: float) -> bool:
        """Make `n` host slots free without dropping a warmer history's host pages."""
        cache = self.cache
        host = cache.host_tier
        assert host is not None
        victim_key = self.victim_key(victim, now)
        while host.available() < n:
            colder = [
                r
                for r in cache.shelf.host_records()
                if r is not victim and r.pins == 0 and self.victim_key(r, now) < victim_key
            ]
            if not colder:
                break
            record = min(colder, key=lambda r: self.victim_key(r, now))
            dropped = cache.shelf.drop_host_front(record, n - host.available())
            host.free(dropped)
            cache.counters.hole_tokens += len(dropped)
        if host.available() < n:
            cache.evict_host(n - host.available())
        return host.available() >= n
