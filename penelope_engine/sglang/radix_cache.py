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
- **Accounting**: shelved slots are evictable (or protected while a refill
  pins them): `evictable_size`, `protected_size`, `total_size` and
  `all_values_flatten` include them, so SGLang's memory invariant
  (free + evictable + protected == total) holds; `sanity_check` checks the
  shelf too.

Holes form on the device tier only, and only while no host tier is attached:
SGLang's host tier (HiCache) loads a node back only below a device-resident
parent, and its pool needs CUDA pinned memory, so it cannot be exercised on
CPU. With a host tier attached, eviction is SGLang's own (LRU demotion).
What the backend supports: `penelope_engine.sglang.support`."""

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
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from penelope_engine.sglang.policy import PrivateChain, coldest_session, private_chains
from penelope_engine.sglang.refill import RefillCoordinator, is_refill_rid
from penelope_engine.sglang.results import (
    PenelopeCounters,
    PenelopeMatch,
    key_namespace,
    key_tokens,
)
from penelope_engine.sglang.shelf import ShelvedSuffix, SuffixShelf
from penelope_engine.sglang.support import FULL, path_above, supported_params
from penelope_engine.util import cdiv


class PenelopeRadixCache(UnifiedRadixCache):
    def __init__(self, params: CacheInitParams) -> None:
        self.shelf = SuffixShelf(params.page_size)
        self.counters = PenelopeCounters()
        self._reconnecting = False
        self._shared_ids: set[int] = set()  # nodes two sessions' paths have used (sticky)
        self.refills = RefillCoordinator(self)
        super().__init__(supported_params(params))
        if not hasattr(self.tree_core, "evictable_device_leaves"):
            raise TypeError(
                f"the penelope radix cache needs SGLang's Python TreeCore, got "
                f"{type(self.tree_core).__name__}"
            )

    def reset(self) -> None:
        super().reset()
        self.shelf = SuffixShelf(self.shelf.page_size)
        self._shared_ids = set()

    @property
    def holes_enabled(self) -> bool:
        return not self.disable and self.cache_controller is None

    # ---- matching --------------------------------------------------------

    def match_holes(self, key: RadixKey) -> PenelopeMatch:
        """The device prefix, then the hole and cached suffix the shelf holds for `key`.

        SGLang's tree match refreshes the tree path's recency as usual; the
        shelf is only read (`pin` marks a shelved suffix as used).
        """
        prefix_len = self._match_tree(MatchPrefixParams(key=key)).device_prefix_len
        hit = self.shelf.find(key_namespace(key), key_tokens(key))
        if hit is None or prefix_len >= hit.hole_end:
            return PenelopeMatch(prefix_len)
        return PenelopeMatch(
            prefix_len,
            holes=((prefix_len, hit.hole_end),),
            suffix=(hit.hole_end, hit.suffix_end),
            record=hit.record,
        )

    def pin(self, record: ShelvedSuffix) -> None:
        """Keep a shelved suffix until a refill reconnects it (or `unpin`); it is in use."""
        record.pins += 1
        record.last_access = get_and_increase_time_counter()

    def unpin(self, record: ShelvedSuffix) -> None:
        if record.pins > 0:
            record.pins -= 1

    def on_release(self, req: Any, *, checkpointed: bool) -> None:
        """SGLang releases every request here; a refill's release frees its parked request."""
        super().on_release(req, checkpointed=checkpointed)
        if is_refill_rid(req.rid):
            self.refills.release(req.rid)

    # ---- insertion and reconnection --------------------------------------

    def insert(self, params: InsertParams) -> InsertResult:
        result = super().insert(params)
        self._note_branches(result.last_device_node)
        if params.key is not None and not self._reconnecting and len(self.shelf):
            self._reconnect(params.key)
        return result

    def _note_branches(self, node_id: int | None) -> None:
        """Remember the branch points on an inserted path: those pages are shared for good."""
        arena = self.tree_core._node_arena
        node = arena.get(node_id) if node_id is not None else None
        while node is not None and node.parent is not None:
            if len(node.children) >= 2:
                self._shared_ids.add(node.id)
            node = node.parent
        if len(self._shared_ids) > 2 * len(arena) + 64:
            self._shared_ids &= arena.keys()

    def _reconnect(self, key: RadixKey) -> None:
        """Put back every shelved suffix whose hole the tree now covers on the device."""
        self._reconnecting = True
        try:
            for record in self.shelf.covered_by(key_namespace(key), key_tokens(key)):
                self._reconnect_record(record)
        finally:
            self._reconnecting = False

    def _reconnect_record(self, record: ShelvedSuffix) -> None:
        extra_key, cache_salt = record.namespace
        head_key = RadixKey(record.path[: record.hole_end], extra_key, cache_salt=cache_salt)
        head = self._match_tree(MatchPrefixParams(key=head_key))
        if head.device_prefix_len < record.hole_end:
            return
        head_slots = self.path_device_indices(head.last_device_node)[: record.hole_end]
        full_key = RadixKey(record.path, extra_key, cache_salt=cache_salt)
        slots = torch.cat([head_slots.to(record.indices.dtype), record.indices])
        self.shelf.remove(record)
        # prev_prefix_len: the head's slots are the tree's own, never duplicates to free;
        # suffix pages the tree already holds again are freed by SGLang's insert walk.
        result = super().insert(
            InsertParams(key=full_key, value=slots, prev_prefix_len=record.hole_end)
        )
        duplicates = result.prefix_len - record.hole_end
        assert duplicates >= 0, "the tree lost the hole while reconnecting its suffix"
        self.counters.reconnected_tokens += record.suffix_len - duplicates
        self.counters.duplicate_tokens += duplicates

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
        freed = self._evict_private(params.num_tokens, done)
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

    def _evict_private(self, need: int, done: Callable[[int], bool]) -> int:
        """Free private pages, coldest session first and its front first."""
        freed = 0
        while not done(freed):
            anchors = self.shelf.anchors() | self._shared_ids
            chains = private_chains(self.tree_core.evictable_device_leaves, anchors)
            victim = coldest_session(chains, self.shelf.records())
            if victim is None:
                break
            want = max(need - freed, 1)
            if isinstance(victim, PrivateChain):
                slots = self._shelve(victim, want)
            else:
                slots = self.shelf.drop_front(victim, want)
            self._free_slots(slots)
            self.counters.hole_tokens += len(slots)
            freed += len(slots)
        return freed

    def _shelve(self, chain: PrivateChain, want: int) -> torch.Tensor:
        """Take a private chain out of the tree; shelve all but its front pages.

        Returns the front slots (at least `want` tokens, in whole pages, at most
        the chain) for the caller to free; the hole is where they were.
        """
        path = path_above(chain.nodes[0])
        slots: list[torch.Tensor] = []
        for node in chain.nodes:
            path.extend(key_tokens(node.key))
            slots.append(node.component_data[FULL].value)
        namespace = key_namespace(chain.nodes[0].key)
        parent = chain.nodes[0].parent
        anchor = None if parent.parent is None else parent.id
        for node in reversed(chain.nodes):
            self._remove_keeping_slots(node.id)
        chain_slots = torch.cat(slots)
        page = self.shelf.page_size
        take = min(cdiv(want, page) * page, len(chain_slots))
        self.counters.shelved_tokens += len(chain_slots)
        if take < len(chain_slots):
            record = ShelvedSuffix(
                namespace=namespace,
                path=path,
                hole_start=chain.hole_start,
                hole_end=chain.hole_start + take,
                indices=chain_slots[take:],
                last_access=chain.last_access,
                anchor=anchor,
            )
            self.shelf.add(record)
        return chain_slots[:take]

    def _remove_keeping_slots(self, node_id: int) -> None:
        """Delete one device leaf through the tree core, without freeing its KV slots."""
        result = self.tree_core.evict_device_leaf(node_id, is_write_back=False)
        assert result.backup_kv is None, "a write-back leaf cannot be shelved"
        result.device_frees.pop(FULL, None)
        self._apply_eviction_result(result)

    def _free_slots(self, slots: torch.Tensor) -> None:
        if len(slots):
            self._drain_device_frees({FULL: [slots]})

    # ---- accounting -------------------------------------------------------

    def evictable_size(self) -> int:
        return super().evictable_size() + self.shelf.evictable_tokens()

    def full_evictable_size(self) -> int:
        return super().full_evictable_size() + self.shelf.evictable_tokens()

    def protected_size(self) -> int:
        return super().protected_size() + self.shelf.pinned_tokens()

    def full_protected_size(self) -> int:
        return super().full_protected_size() + self.shelf.pinned_tokens()

    def total_size(self) -> tuple[int, int]:
        tree, aux = super().total_size()
        return tree + self.shelf.evictable_tokens() + self.shelf.pinned_tokens(), aux

    def all_values_flatten(self) -> torch.Tensor:
        tree = super().all_values_flatten()
        return torch.cat([tree.to(torch.int64).cpu(), self.shelf.all_indices()])

    def sanity_check(self) -> None:
        super().sanity_check()
        self.shelf.check()
        tree_slots = set(super().all_values_flatten().tolist())
        shelf_slots = set(self.shelf.all_indices().tolist())
        assert not tree_slots & shelf_slots, "a slot is both in the tree and on the shelf"
