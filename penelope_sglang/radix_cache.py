"""`PenelopeRadixCache`: SGLang's `UnifiedRadixCache` with Penelope's eviction and holes.

What changes against SGLang's default tree (everything else is inherited):

- **Eviction** (`_evict`): private pages go before shared ones; among private
  sessions the coldest goes first, and within it the lowest positions first
  (`policy`). Taking the front of a private chain out of the tree takes the
  whole chain out: the front pages are freed (the *hole*) and the rest stays
  allocated on the suffix shelf (`shelf`). Shared pages are left to SGLang's
  own leaf-LRU walk, which runs once no private page is left.
- **Matching** (`match_holes`): SGLang's match reports the device prefix; the
  shelf adds the hole and the cached suffix behind it.
- **Reconnection** (`insert`): once an insert makes the path up to a hole's end
  device-resident (the refill request, see `refill`), the shelved suffix goes
  back into the tree below it through SGLang's own insert walk, so later
  matches, `cached_tokens` and `cache_hit_rate` count it like any cached page.
- **Accounting** (`accounting.ShelfAccounting`, the layer below this class):
  shelved slots count as evictable or protected, so SGLang's memory invariant
  (free + evictable + protected == total) holds.

- **Host tier** (HiCache attached, `--enable-hierarchical-cache`): a history's
  device front goes to HiCache's host pool while it has room and is dropped
  past it (`eviction`); a host span comes back through the refill path
  (`host_tier`). Nodes SGLang itself backed up to the host (write-through)
  and shared pages are demoted SGLang's way.
- **Sessions** (`sessions`): the adapter's session id and hints arrive in the
  request's `kv_hints`; the cache keeps a per-session view (digests for the
  router, the miss ledger's `evicted` count), orders victims by the hints and
  pins retained sessions with SGLang's own node locks.

What the backend supports: `penelope_sglang.support`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.mem_cache.base_prefix_cache import (
    EvictParams,
    EvictResult,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.components.base import get_and_increase_time_counter

from penelope_sglang.accounting import ShelfAccounting
from penelope_sglang.eviction import Evictor
from penelope_sglang.host_tier import HostTier
from penelope_sglang.refill import RefillCoordinator, is_refill_rid
from penelope_sglang.results import (
    PenelopeCounters,
    PenelopeMatch,
    key_namespace,
    key_tokens,
)
from penelope_sglang.sessions import RetainPins, SessionBook, hint_of
from penelope_sglang.shelf import ShelvedSuffix, SuffixShelf
from penelope_sglang.support import FULL, supported_params
from penelope_sglang.views import SessionViews


class PenelopeRadixCache(ShelfAccounting):
    def __init__(self, params: CacheInitParams) -> None:
        self.shelf = SuffixShelf(params.page_size)
        self.counters = PenelopeCounters()
        self._reconnecting = False
        self.shared_ids: set[int] = set()  # nodes two sessions' paths have used (sticky)
        self.refills = RefillCoordinator(self)
        self.book = SessionBook()
        self.pins = RetainPins(self.book, self)
        self.evictor = Evictor(self)
        self.views = SessionViews(self)
        self.host_tier: HostTier | None = None
        super().__init__(supported_params(params))
        if not hasattr(self.tree_core, "evictable_device_leaves"):
            raise TypeError(
                f"the penelope radix cache needs SGLang's Python TreeCore, got "
                f"{type(self.tree_core).__name__}"
            )

    def init_hicache(self, server_args: Any, params: CacheInitParams) -> None:
        """SGLang's HiCache set-up, then Penelope's use of its host pool."""
        super().init_hicache(server_args, params)
        self.host_tier = HostTier.of(self)

    def reset(self) -> None:
        self.pins.release_all()
        super().reset()
        self.shelf = SuffixShelf(self.shelf.page_size)
        self.shared_ids = set()
        self.book = SessionBook(self.book.max_sessions)
        self.pins = RetainPins(self.book, self)

    @property
    def holes_enabled(self) -> bool:
        return not self.disable

    # ---- matching --------------------------------------------------------

    def match_holes(self, key: RadixKey) -> PenelopeMatch:
        """The device prefix, then the hole and cached suffix the shelf holds for `key`.

        SGLang's tree match refreshes the tree path's recency as usual; the
        shelf is only read (`pin` marks a shelved suffix as used).
        """
        prefix_len = self._match_tree(MatchPrefixParams(key=key)).device_prefix_len
        hit = self.shelf.find(key_namespace(key), key_tokens(key))
        return PenelopeMatch.behind(prefix_len, hit)

    def pin(self, record: ShelvedSuffix) -> None:
        """Keep a shelved suffix until a refill reconnects it (or `unpin`); it is in use."""
        record.pins += 1
        record.last_access = get_and_increase_time_counter()

    def unpin(self, record: ShelvedSuffix) -> None:
        if record.pins > 0:
            record.pins -= 1

    def on_release(self, req: Any, *, checkpointed: bool) -> None:
        """SGLang releases every request here; a refill's release frees its parked request,
        a session's settles its view (and its retention pin) on what it left in the tree."""
        super().on_release(req, checkpointed=checkpointed)
        if is_refill_rid(req.rid):
            self.refills.release(req.rid)
            return
        hint = hint_of(getattr(req, "kv_hints", None))
        if hint is not None and not checkpointed:
            self.views.settle(hint.session, req)

    def note_request(self, req: Any, key: RadixKey) -> None:
        """A new request: apply its session hints, remember what its session had cached
        (`req.penelope_known_tokens`, the ledger's evicted/new split)."""
        hint = hint_of(getattr(req, "kv_hints", None))
        if hint is None:
            return
        tokens = key_tokens(key)
        known = self.book.known_tokens(hint.session, tokens)
        req.penelope_known_tokens = known // self.page_size * self.page_size
        entry = self.book.touch(hint, key_namespace(key), self.evictor.clock())
        if hint.end_session:
            self.pins.unpin(entry)

    # ---- insertion and reconnection --------------------------------------

    def insert(self, params: InsertParams) -> InsertResult:
        result = super().insert(params)
        self._note_branches(result.last_device_node)
        if params.key is not None and not self._reconnecting and len(self.shelf):
            self._reconnect(params.key)
        return result

    def _note_branches(self, node_id: int | None) -> None:
        """Remember the branch points on an inserted path: those pages are shared for good."""
        arena = self.tree_core._node_arena  # noqa: SLF001 - SGLang: its tree's node arena
        node = arena.get(node_id) if node_id is not None else None
        while node is not None and node.parent is not None:
            if len(node.children) >= 2:
                self.shared_ids.add(node.id)
            node = node.parent
        if len(self.shared_ids) > 2 * len(arena) + 64:
            self.shared_ids &= arena.keys()

    def _reconnect(self, key: RadixKey) -> None:
        """Put back every shelved suffix whose hole the tree now covers on the device.

        A record without a hole (only a host span) is not loaded on someone else's
        insert: only its own request brings it back (`refill.RefillCoordinator.plan`).
        """
        for record in self.shelf.covered_by(key_namespace(key), key_tokens(key)):
            if record.hole_len > 0:
                self.reconnect(record)

    def reconnect(self, record: ShelvedSuffix) -> bool:
        """Put `record` back into the tree below its head, loading its host span first.

        False when the head `[0, hole_end)` is not all device-resident (the hole is
        still to be recomputed) or the device has no room for the host span.
        """
        if not self.shelf.holds(record):
            return False  # taken by an eviction since it was found
        extra_key, cache_salt = record.namespace
        head_key = RadixKey(record.path[: record.hole_end], extra_key, cache_salt=cache_salt)
        head = self._match_tree(MatchPrefixParams(key=head_key))
        if head.device_prefix_len < record.hole_end:
            return False
        lock = self.lock(head.last_device_node)
        record.pins += 1
        try:
            loaded = self._load_host_span(record)
        finally:
            record.pins -= 1
            self.unlock(lock)
        if loaded is None:
            return False
        head_slots = self.path_device_indices(head.last_device_node)[: record.hole_end]
        full_key = RadixKey(record.path, extra_key, cache_salt=cache_salt)
        dtype = record.indices.dtype
        slots = torch.cat([head_slots.to(dtype), loaded.to(dtype), record.indices])
        self.shelf.remove(record)
        # prev_prefix_len: the head's slots are the tree's own, never duplicates to free;
        # suffix pages the tree already holds again are freed by SGLang's insert walk.
        self._reconnecting = True
        try:
            result = super().insert(
                InsertParams(key=full_key, value=slots, prev_prefix_len=record.hole_end)
            )
        finally:
            self._reconnecting = False
        duplicates = result.prefix_len - record.hole_end
        assert duplicates >= 0, "the tree lost the hole while reconnecting its suffix"
        self.counters.reconnected_tokens += record.suffix_len - duplicates
        self.counters.duplicate_tokens += duplicates
        return True

    def _load_host_span(self, record: ShelvedSuffix) -> torch.Tensor | None:
        """Device slots holding the record's host span (copied back), or None (no room)."""
        if record.host_len == 0:
            return torch.empty(0, dtype=torch.int64)
        assert self.host_tier is not None, "a host span without a host tier"
        allocator = self.token_to_kv_pool_allocator
        n = record.host_len
        if allocator.available_size() < n:
            self.evict(EvictParams(num_tokens=n - allocator.available_size()))
        slots = allocator.alloc(n) if allocator.available_size() >= n else None
        if slots is None:
            return None
        self.host_tier.load(record.host_indices, slots)
        self.host_tier.free(record.host_indices)
        self.counters.host_loaded_tokens += n
        record.host_indices = torch.empty(0, dtype=torch.int64)
        return slots

    # ---- eviction ---------------------------------------------------------

    def _evict(
        self,
        params: EvictParams,
        available_size_targets: dict[ComponentType, tuple[ComponentType, int]] | None = None,
        *,
        allocation_reclaim_satisfied: Callable[[], bool] | None = None,
    ) -> EvictResult:
        if not self.holes_enabled:
            return super()._evict(
                params,
                available_size_targets,
                allocation_reclaim_satisfied=allocation_reclaim_satisfied,
            )
        done = self._reclaim_done(
            params.num_tokens, available_size_targets, allocation_reclaim_satisfied
        )
        freed = self.evictor.evict_private(params.num_tokens, done)
        if done(freed):
            return EvictResult(num_tokens_evicted=freed)
        rest = EvictParams(num_tokens=max(params.num_tokens - freed, 0))
        result = super()._evict(
            rest, available_size_targets, allocation_reclaim_satisfied=allocation_reclaim_satisfied
        )
        result.num_tokens_evicted += freed
        return result

    def _reclaim_done(
        self,
        need: int,
        targets: dict[ComponentType, tuple[ComponentType, int]] | None,
        satisfied: Callable[[], bool] | None,
    ) -> Callable[[int], bool]:
        """When to stop taking private pages, mirroring SGLang's own stop rules."""
        if satisfied is not None:
            return lambda freed: satisfied()
        target = (targets or {}).get(FULL)
        if target is not None:
            return lambda freed: self._component_available_size(FULL) >= target[1]
        return lambda freed: freed >= need

    def remove_keeping_slots(self, node_id: int) -> None:
        """Delete one device leaf through the tree core, without freeing its KV slots."""
        result = self.tree_core.evict_device_leaf(node_id, is_write_back=False)
        assert result.backup_kv is None, "a write-back leaf cannot be shelved"
        result.device_frees.pop(FULL, None)
        self._apply_eviction_result(result)

    def free_slots(self, slots: torch.Tensor) -> None:
        if len(slots):
            self._drain_device_frees({FULL: [slots]})
