"""Ray Serve LLM's ``PrefixCacheAffinityRouter`` as a routing policy: ``ray_prefix``.

Models ``ray/llm/_internal/serve/routing_policies/prefix_aware/prefix_aware_router.py``
and its ``prefix_tree.py`` (``PrefixTree``), Ray 2.60.0. The router keeps one
prefix tree of the prompts it routed, each node owned by the replicas
("tenants") whose prompts went through it; it never reads engine state::

    every request ─── draw a pow2 pair first (Ray always computes this fallback)
    imbalanced ────── max(queue_len) - min(queue_len) > imbalanced_threshold
                      (default inf: never): the pow2 pair
    match rate ────── longest prefix some replica owns / prompt length
      < threshold ─── (default 0.1) the replicas owning the fewest characters
      else ────────── the replicas owning that longest prefix
    routed ────────── the whole prompt is inserted for the chosen replica
    eviction ──────── off by default; every eviction_interval_s each replica
                      above the threshold loses its least recently used nodes
                      (all of one timestamp at a time) until at the target

Ray returns the chosen group as its only rank, so its base class takes the
shortest non-full queue in it, breaking ties by set-iteration order (arbitrary);
a group whose replicas are all full makes the request wait in the router and
be decided again. ``choose`` takes the least loaded open replica of the group
(the first in view order on a tie) and, if all are full, the least loaded of
the group, standing for the wait.

Where the model differs from Ray:

- One page hash of ``PeerRequest.prompt_pages`` is one character of Ray's text
  tree: a match of k pages stands for a match of k characters, so the match
  rate is over full pages, and the eviction bounds (Ray's 400,000 / 360,000
  characters, kept as numbers) count pages. Ray's text is the chat messages'
  ``content`` (or ``prompt``) concatenated, which is longer and includes the
  sub-page tail the model cannot see.
- The tree is a trie with one node per page, not a radix tree; matches, owner
  sets, per-replica counts and LRU eviction are the same at page granularity.
- A prompt with no full page has match rate 0 (Ray divides by the text length
  and would raise on an empty text).
- Replicas seen in a view are added as tenants when ranking (Ray adds them in
  ``update_replicas``); ``sync_replicas`` adds and removes them as Ray's
  ``update_replicas`` does. The least-cached choice is among replicas in the
  view (Ray's is over all tenants, the same set in a synced router).
- Eviction runs lazily at the first ranking after each interval tick, with the
  policy's clock; Ray runs it in a thread on wall time (same tree state, since
  nothing is inserted between the tick and that ranking).
- Insertion happens in ``choose`` (or ``record_route``); ``remember`` carries no
  prompt and does nothing. Ray's pow2 draws use the global ``random``; the
  model draws with ``random.Random(config.seed)``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

# router.policies imports this module to register it: read pow2_pair at call time.
import router.policies as policies
from bench.peers.base import PeerRequest, PeerRouter, PeerView
from penelope_engine.util import require
from router.schema import (
    NO_REPLICAS,
    Choice,
    RouteDecision,
    pick_replica,
)


@dataclass(frozen=True)
class RayPrefixConfig:
    """Knobs of ``PrefixCacheAffinityRouter.initialize_state``, with Ray's defaults."""

    imbalanced_threshold: float = math.inf  # queue-length spread above which pow2 decides
    match_rate_threshold: float = 0.1  # matched share of the prompt below which least cached
    do_eviction: bool = False
    eviction_threshold_pages: int = 400_000  # Ray: characters; here one page = one character
    eviction_target_pages: int = 360_000
    eviction_interval_s: float = 10.0

    def __post_init__(self) -> None:
        require(
            self.imbalanced_threshold >= 0,
            f"imbalanced_threshold must be >= 0, got {self.imbalanced_threshold}",
        )
        require(
            0.0 <= self.match_rate_threshold <= 1.0,
            f"match_rate_threshold must be in [0, 1], got {self.match_rate_threshold}",
        )
        require(
            0 <= self.eviction_target_pages <= self.eviction_threshold_pages,
            "eviction pages must satisfy 0 <= target <= threshold, got "
            f"{self.eviction_target_pages}, {self.eviction_threshold_pages}",
        )
        require(
            self.eviction_interval_s > 0,
            f"eviction_interval_s must be > 0, got {self.eviction_interval_s}",
        )


class _Node:
    """One page of the trie; ``owners`` maps each replica through it to its last access."""

    __slots__ = ("key", "parent", "children", "owners")

    def __init__(self, key: int | None = None, parent: _Node | None = None) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.owners: dict[str, float] = {}


class RayPrefixTree:
    """Ray's multi-tenant ``PrefixTree`` over page hashes (one node per page)."""

    def __init__(self) -> None:
        self.root = _Node()
        self.pages: dict[str, int] = {}  # tenant -> pages it owns (Ray: tenant_to_char_count)
        self._lru: dict[str, dict[_Node, None]] = {}  # tenant -> its nodes, oldest touch first

    def add_tenant(self, tenant: str, now: float) -> None:
        if tenant not in self.pages:
            self.pages[tenant] = 0
            self._lru[tenant] = {}
            self.root.owners[tenant] = now

    def remove_tenant(self, tenant: str) -> None:
        if tenant not in self.pages:
            return
        for node in list(self._lru[tenant]):
            self._drop(node, tenant)
        del self.pages[tenant], self._lru[tenant]
        self.root.owners.pop(tenant, None)

    def insert(self, pages: Sequence[int], tenant: str, now: float) -> None:
        """Own every page of ``pages`` for ``tenant``, touched at ``now`` (unknown: ignored)."""
        if tenant not in self.pages:
            return
        lru = self._lru[tenant]
        node = self.root
        node.owners[tenant] = now
        for h in pages:
            child = node.children.get(h)
            if child is None:
                child = node.children[h] = _Node(h, node)
            if tenant not in child.owners:
                self.pages[tenant] += 1
            child.owners[tenant] = now
            lru.pop(child, None)
            lru[child] = None
            node = child

    def match(self, pages: Sequence[int], candidates: Sequence[str]) -> tuple[int, list[str]]:
        """Pages of the longest prefix some candidate owns, and the candidates owning it."""
        avail = [t for t in candidates if t in self.pages]
        if not avail:
            return 0, []
        node, depth = self.root, 0
        for h in pages:
            child = node.children.get(h)
            if child is None or not any(t in child.owners for t in avail):
                break
            node, depth = child, depth + 1
        return depth, [t for t in avail if t in node.owners]

    def evict(self, tenant: str, min_remove: int) -> int:
        """Drop ``tenant``'s least recently touched nodes, a timestamp at a time."""
        if tenant not in self.pages:
            return 0
        min_remove = min(min_remove, self.pages[tenant])
        lru, removed = self._lru[tenant], 0
        while removed < min_remove and lru:
            stamp = next(iter(lru)).owners[tenant]
            while lru and (oldest := next(iter(lru))).owners[tenant] == stamp:
                removed += self._drop(oldest, tenant)
        return removed

    def _drop(self, node: _Node, tenant: str) -> int:
        del node.owners[tenant], self._lru[tenant][node]
        self.pages[tenant] -= 1
        if not node.owners and node.parent is not None and node.key is not None:
            node.parent.children.pop(node.key, None)
        return 1


class RayPrefixAffinityRouter(PeerRouter[RayPrefixConfig]):
    """Ray Serve LLM's prefix-cache affinity routing (see the module docstring)."""

    name = "ray_prefix"
    make_options = RayPrefixConfig
    reads_prompt = True

    def setup(self) -> None:
        self.tree = RayPrefixTree()
        self._next_eviction: float | None = None

    def rank(self, views: Sequence[PeerView], request: PeerRequest) -> RouteDecision:
        """Ray's ``choose_replicas``: one group (the pow2 pair or the prefix choice)."""
        if not views:
            return NO_REPLICAS
        now = self._clock()
        self._maybe_evict(now)
        ids = [v.replica_id for v in views]
        for rid in ids:
            self.tree.add_tenant(rid, now)
        fallback = RouteDecision((policies.pow2_pair(ids, self._rng),), "pow2")
        queues = [v.queue_len for v in views]
        if max(0, *queues) - min(queues) > self.options.imbalanced_threshold:
            return fallback
        pages = request.prompt_pages
        matched, owners = self.tree.match(pages, ids)
        rate = matched / len(pages) if pages else 0.0
        if rate < self.options.match_rate_threshold:
            counts = {rid: self.tree.pages[rid] for rid in ids}
            least = min(counts.values())
            return RouteDecision((tuple(r for r in ids if counts[r] == least),), "least_cached")
        return RouteDecision((tuple(owners),), "prefix") if owners else fallback

    def choose(self, views: Sequence[PeerView], request: PeerRequest) -> Choice:
        """Rank, take the least loaded replica of the group, and insert the prompt there."""
        by_id = {v.replica_id: v for v in views}
        decision = self.rank(views, request)
        if decision.reason == "pow2":
            replica_id = pick_replica(decision.ranks, by_id)
        else:  # Ray waits for this group rather than going elsewhere
            replica_id = pick_replica(decision.ranks, {r: by_id[r] for r in decision.ranks[0]})
        self.record_route(request, replica_id)
        return Choice(replica_id, decision)

    def record_route(self, request: PeerRequest, replica_id: str) -> None:
        """Ray's ``on_request_routed``: the whole prompt now belongs to ``replica_id``."""
        self.tree.insert(request.prompt_pages, replica_id, self._clock())

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        """Ray's ``update_replicas``: tenants follow the live set; no sessions move."""
        now = self._clock()
        for rid in [t for t in self.tree.pages if t not in live_ids]:
            self.tree.remove_tenant(rid)
        for rid in live_ids:
            self.tree.add_tenant(rid, now)
        return []

    def _maybe_evict(self, now: float) -> None:
        """Ray's eviction loop, run at the first ranking after each interval tick."""
        opts = self.options
        if not opts.do_eviction:
            return
        if self._next_eviction is None:
            self._next_eviction = now + opts.eviction_interval_s
            return
        if now < self._next_eviction:
            return
        ticks = math.floor((now - self._next_eviction) / opts.eviction_interval_s) + 1
        self._next_eviction += ticks * opts.eviction_interval_s
        for tenant, count in list(self.tree.pages.items()):
            if count > opts.eviction_threshold_pages:
                self.tree.evict(tenant, count - opts.eviction_target_pages)
