"""sgl-router's ``cache_aware`` policy over page hashes, as a Penelope routing policy.

Models ``CacheAwarePolicy::select_worker`` and its approximate radix tree from
sglang-router 0.3.2 (the SGLang Model Gateway wheel, built 2026-01-15):
``src/policies/cache_aware.rs`` and ``src/policies/tree.rs`` at
lightseekorg/smg 4e108ef08197b42580768de054cf6e5ea5da1344 (the line numbers in
the binary's log call sites match it). Defaults are the Python launcher's
(``sglang_router/router_args.py``), not ``CacheAwareConfig::default()``.

Per request (``select_worker``, cache_aware.rs:351-473)::

    imbalanced ──── max_load - min_load > abs_threshold and
                    max_load > min_load * rel_threshold:
                    the least loaded worker (first of equals); insert there
    balanced ────── match the prompt in the tree: match rate = matched / total
      rate > cache_threshold ─ the tenant of the deepest node reached; insert
                               (a tenant no longer a worker: remove it from the
                               tree, send to the first worker, insert nothing)
      else ─────────────────── the least loaded worker (first of equals); insert

One tree holds every worker as a tenant: a node lists the tenants whose
inserted prompts pass through it, each with an LRU epoch. A tenant's size is
the pages of the nodes it is on. Every ``eviction_interval_s`` the least
recently used leaves of each tenant over ``max_tree_size`` are dropped until it
fits. Load is the router's count of requests in flight per worker (raised when
a request is sent, lowered when its response body ends, router.rs:294 and
worker.rs:1099-1127); here it is ``PeerView.queue_len``.

Where the model differs from the source: a character of the source's text
(message contents joined by spaces, not the chat template) is one full KV page
(16 tokens) of the tokenized prompt, so the last partial page never matches;
the epoch counter is per tree, not per process; a node's fallback tenant when
its cached one is gone, and the order of equal epochs in eviction, follow
insertion order (the source's DashMap and BinaryHeap leave both unspecified);
the eviction thread's work runs at the first request at or after each tick;
there are no health or circuit-breaker filters, ``max_ongoing`` is ignored (the
source sends to a full worker too) and the module docstring's "smallest tree"
below the threshold is the source's code's least loaded worker (since PR 14650).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from bench.peers.base import PeerRequest, PeerRouter, PeerView
from penelope_engine.util import require
from router.schema import (
    NO_REPLICAS,
    RouteDecision,
)

NO_TENANT = "empty"  # what tree.rs:583 names the tenant of a node that has none


@dataclass(frozen=True)
class SglCacheAwareConfig:
    """The ``cache_aware`` knobs, with sglang_router 0.3.2's CLI defaults."""

    cache_threshold: float = 0.3  # --cache-threshold
    balance_abs_threshold: int = 64  # --balance-abs-threshold
    balance_rel_threshold: float = 1.5  # --balance-rel-threshold
    eviction_interval_s: float = 60.0  # --eviction-interval-secs; 0: never evict
    max_tree_size: int = 2**26  # --max-tree-size, in pages per tenant (chars in the source)

    def __post_init__(self) -> None:
        require(
            0.0 <= self.cache_threshold <= 1.0,
            f"cache_threshold must be in [0, 1], got {self.cache_threshold}",
        )
        require(
            self.balance_abs_threshold >= 0,
            f"balance_abs_threshold must be >= 0, got {self.balance_abs_threshold}",
        )
        require(
            self.balance_rel_threshold > 0.0,
            f"balance_rel_threshold must be > 0, got {self.balance_rel_threshold}",
        )
        require(
            self.eviction_interval_s >= 0.0,
            f"eviction_interval_s must be >= 0, got {self.eviction_interval_s}",
        )
        require(self.max_tree_size >= 0, f"max_tree_size must be >= 0, got {self.max_tree_size}")


class _Node:
    __slots__ = ("children", "last_tenant", "parent", "tenants", "text")

    def __init__(
        self,
        text: tuple[int, ...],
        parent: _Node | None,
        tenants: dict[str, int],
        last_tenant: str | None,
    ) -> None:
        self.text = text
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.tenants = tenants  # tenant -> last access epoch
        self.last_tenant = last_tenant  # cached tenant for prefix matches


def _shared(text: tuple[int, ...], start: int, edge: tuple[int, ...]) -> int:
    """How many leading pages of ``edge`` equal ``text[start:]``."""
    if text[start : start + len(edge)] == edge:
        return len(edge)
    n = 0
    for a, b in zip(edge, text[start:]):
        if a != b:
            break
        n += 1
    return n


class ApproxTree:
    """tree.rs's multi-tenant radix tree with pages for characters."""

    def __init__(self) -> None:
        self.root = _Node((), None, {}, None)
        self.tenant_pages: dict[str, int] = {}  # tenant_char_count
        self._epoch = 0

    def _tick(self) -> int:
        self._epoch += 1
        return self._epoch - 1

    def insert(self, text: tuple[int, ...], tenant: str) -> None:
        """tree.rs:362-527: add the tenant along the path, splitting an edge it leaves."""
        self.root.tenants.setdefault(tenant, 0)
        self.tenant_pages.setdefault(tenant, 0)
        node, i = self.root, 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:  # a new leaf holds the rest (tree.rs:398-422)
                leaf = _Node(text[i:], node, {tenant: self._tick()}, tenant)
                self.tenant_pages[tenant] += len(text) - i
                node.children[text[i]] = leaf
                return
            shared = _shared(text, i, child.text)
            if shared < len(child.text):  # split (tree.rs:435-482); the top keeps the tenants
                top = _Node(child.text[:shared], node, dict(child.tenants), child.last_tenant)
                child.text, child.parent = child.text[shared:], top
                top.children[child.text[0]] = child
                node.children[text[i]] = top
                child = top
            if tenant not in child.tenants:  # passing through: epoch 0 (tree.rs:466-499)
                self.tenant_pages[tenant] += len(child.text)
                child.tenants[tenant] = 0
            node, i = child, i + shared
        node.tenants[tenant] = self._tick()  # the prompt ends here (tree.rs:524-526)

    def prefix_match(self, text: tuple[int, ...]) -> tuple[str, int]:
        """tree.rs:531-619: the tenant of the deepest node reached and the pages matched."""
        node, i = self.root, 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                break
            shared = _shared(text, i, child.text)
            node, i = child, i + shared
            if shared < len(child.text):  # a partial edge still names its tenant
                break
        tenant = node.last_tenant
        if tenant is None or tenant not in node.tenants:
            tenant = next(iter(node.tenants), NO_TENANT)
            node.last_tenant = tenant
        epoch = self._tick()
        if epoch & 0x7 == 0:  # one match in eight refreshes the LRU epoch (tree.rs:603-607)
            node.tenants[tenant] = epoch
        return tenant, i

    def evict(self, max_pages: int) -> None:
        """tree.rs:718-821: drop LRU leaves of each tenant over ``max_pages`` until it fits."""
        heap: list[tuple[int, int, str, _Node]] = []
        order = itertools.count()
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            for tenant in self._leaf_tenants(node):
                heap.append((node.tenants[tenant], next(order), tenant, node))
        heapq.heapify(heap)
        while heap:
            _, _, tenant, node = heapq.heappop(heap)
            used = self.tenant_pages.get(tenant)
            if used is not None and used <= max_pages:
                continue
            if tenant not in node.tenants or self._below(node, tenant):
                continue  # no longer this tenant's leaf
            if tenant in self.tenant_pages:
                self.tenant_pages[tenant] = max(0, self.tenant_pages[tenant] - len(node.text))
            del node.tenants[tenant]
            parent = node.parent
            if parent is None:
                continue
            if not node.children and not node.tenants:
                parent.children.pop(node.text[0], None)
            if tenant in parent.tenants and not self._below(parent, tenant):
                heapq.heappush(heap, (parent.tenants[tenant], next(order), tenant, parent))

    def remove_tenant(self, tenant: str) -> None:
        """tree.rs:823-894: take the tenant off every node; drop the nodes left empty."""

        def strip(node: _Node) -> None:
            for key, child in list(node.children.items()):
                if tenant in child.tenants:
                    strip(child)
                    if not child.children and not child.tenants:
                        del node.children[key]
            node.tenants.pop(tenant, None)

        strip(self.root)
        self.tenant_pages.pop(tenant, None)

    @staticmethod
    def _below(node: _Node, tenant: str) -> bool:
        return any(tenant in c.tenants for c in node.children.values())

    @classmethod
    def _leaf_tenants(cls, node: _Node) -> list[str]:
        return [t for t in node.tenants if not cls._below(node, t)]


class SglCacheAwareRouter(PeerRouter[SglCacheAwareConfig]):
    """sgl-router's ``cache_aware`` (see the module docstring). Not thread-safe. `choose`
    is the base's: the source's pick, full or not (sgl-router does not hold requests back)."""

    name = "sgl_cache_aware"
    make_options = SglCacheAwareConfig
    reads_prompt = True

    def setup(self) -> None:
        self.tree = ApproxTree()
        self._next_eviction = self._clock() + self.options.eviction_interval_s  # PeriodicTask

    def rank(self, views: Sequence[PeerView], request: PeerRequest) -> RouteDecision:
        """The one worker ``select_worker`` picks; the tree learns the prompt as it does."""
        if not views:
            return NO_REPLICAS
        self._evict_if_due()
        for view in views:  # add_worker: a new worker joins the tree empty (cache_aware.rs:173)
            if view.replica_id not in self.tree.root.tenants:
                self.tree.insert((), view.replica_id)
        replica_id, reason = self._select(views, request.prompt_pages)
        return RouteDecision(((replica_id,),), reason)

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        """Workers that left are removed from the tree (``remove_worker``); no sessions move."""
        for tenant in [t for t in self.tree.tenant_pages if t not in live_ids]:
            self.tree.remove_tenant(tenant)
        return []

    def _select(self, views: Sequence[PeerView], pages: tuple[int, ...]) -> tuple[str, str]:
        opts = self.options
        loads = [v.queue_len for v in views]
        low, high = min(loads), max(loads)
        least = min(views, key=lambda v: v.queue_len).replica_id  # Rust's min_by_key: the first
        if (
            high - low > opts.balance_abs_threshold
            and high > low * opts.balance_rel_threshold  # cache_aware.rs:371-372
        ):
            self.tree.insert(pages, least)  # cache_aware.rs:312-321
            return least, "imbalanced"
        tenant, matched = self.tree.prefix_match(pages)
        rate = matched / len(pages) if pages else 0.0  # cache_aware.rs:396-400
        if rate > opts.cache_threshold:
            if any(v.replica_id == tenant for v in views):
                self.tree.insert(pages, tenant)
                return tenant, "cache_hit"
            self.tree.remove_tenant(tenant)  # a stale tenant (cache_aware.rs:441-461)
            return views[0].replica_id, "stale_tenant"
        self.tree.insert(pages, least)  # cache_aware.rs:410-420
        return least, "min_load"

    def _evict_if_due(self) -> None:
        interval = self.options.eviction_interval_s
        now = self._clock()
        if interval <= 0 or now < self._next_eviction:
            return
        self.tree.evict(self.options.max_tree_size)  # cache_aware.rs:101-120
        missed = int((now - self._next_eviction) // interval)
        self._next_eviction += (missed + 1) * interval
