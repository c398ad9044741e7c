"""llm-d's inference scheduler, its default scheduling profile, as a routing policy: ``llm_d``.

Models llm-d/llm-d-inference-scheduler v0.8.0 (05c91f0d655fbd7ea71fc50949c899c360d06f07),
whose ``cmd/epp/main.go`` runs the Gateway API Inference Extension's EPP runner
(``sigs.k8s.io/gateway-api-inference-extension`` v1.5.0, go.mod) with llm-d's plugins
added. With no configuration file the runner loads GIE v1.5.0's default
(kubernetes-sigs/gateway-api-inference-extension df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849,
``pkg/epp/config/loader/defaults.go``, ``loadDefaultConfig``): one ``default``
profile with

    queue-scorer ................ weight 2   (``scorer/queuedepth/queue.go``)
    kv-cache-utilization-scorer . weight 2   (``scorer/kvcacheutilization/kvcache_utilization.go``)
    prefix-cache-scorer ......... weight 3   (``scorer/prefix/plugin.go``)
    max-score-picker (added by ``ensureSchedulingLayer``; ``picker/max_score_picker.go``)

and no filter. The prefix scorer of this default is the approximate one: it
reads the ``approx-prefix-cache-producer`` that ``configloader.go`` adds with it
(``requestcontrol/dataproducer/approximateprefix/``: ``plugin.go``, ``indexer.go``,
``hashing.go``, ``types.go``), an index of the prompts the scheduler itself
routed. llm-d's precise scorer (KV events, ``precise-prefix-cache-scorer``) is
only in llm-d's sample configs, not the default, so it is not what this models.
Per request (``SchedulerProfile.runScorerPlugins``, ``MaxScorePicker.Pick``)::

    queue ───── (max waiting - waiting) / (max waiting - min waiting) over the
                candidates; 1.0 for all when they are equal
    kv ──────── 1 - KV-cache usage
    prefix ──── blocks of the prompt's first 256 found for the endpoint / the
                prompt's blocks (0 when the prompt is under one block). The match
                walks the prompt's blocks from the first and stops at the first
                block no endpoint has; an endpoint's count is the blocks in that
                walk it holds
    score ───── 2 x queue + 2 x kv + 3 x prefix (each clamped to [0, 1])
    pick ────── the highest score, ties uniform at random (shuffle, stable sort)
    routed ──── the prompt's block hashes join the picked endpoint's LRU of
                ``lru_capacity_per_server`` hashes (its oldest drop out); every
                2 minutes endpoints no longer in the pool leave the index

In the simulator one page of ``PeerRequest.prompt_pages`` is one block (the
block size is auto-tuned to the engine's, 16 tokens, as the page), and:

    waiting ──── ``PeerView.waiting_requests``
    KV usage ─── ``PeerView.kv_usage``

Where the model differs from llm-d:

- vLLM's ``kv_cache_usage_perc`` counts blocks held by requests (cached blocks
  no request holds count as free), as the view's ``kv_usage`` does.
- The approximate index hashes the request's JSON text in 64-character blocks
  (16 tokens x 4 characters); the model uses the page hashes, so a block is
  exactly a page of tokens and the text's framing is not seen.
- ``lru_capacity_per_server`` is 31,250 (GIE's default, used when the engine
  does not report its GPU block count); with AutoTune on, GIE takes the
  engine's ``num_gpu_blocks``, which the view does not carry.
- Flow control and the saturation detector are not modelled (requests of the
  default priority are never shed); the pick goes to a full replica too.
- The index learns the routed prompt at once (GIE adds it asynchronously after
  the pick); the inactive-endpoint sweep runs at the first request at or after
  each 2-minute tick of the policy's clock, and in ``sync_replicas``.
- Tie draws use ``random.Random(config.seed)``; GIE a time-seeded PCG.

The model is checked against the source only: the EPP is Go, with no build of it
on the package index, so no choice here was compared with the real scheduler.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from bench.peers.base import PeerRequest, PeerRouter, PeerView
from penelope_engine.util import require
from router.schema import (
    NO_REPLICAS,
    RouteDecision,
)


@dataclass(frozen=True)
class LlmdConfig:
    """GIE v1.5.0's default profile weights and approximate prefix index defaults."""

    queue_scorer_weight: float = 2.0
    kv_cache_utilization_scorer_weight: float = 2.0
    prefix_cache_scorer_weight: float = 3.0
    max_prefix_blocks: int = 256  # defaultMaxPrefixBlocks
    lru_capacity_per_server: int = 31_250  # defaultLRUCapacityPerServer, in blocks
    pod_check_interval_s: float = 120.0  # podActiveCheckInterval; 0: only sync_replicas

    def __post_init__(self) -> None:
        for name in (
            "queue_scorer_weight",
            "kv_cache_utilization_scorer_weight",
            "prefix_cache_scorer_weight",
            "pod_check_interval_s",
        ):
            value = getattr(self, name)
            require(value >= 0.0, f"{name} must be >= 0, got {value}")
        require(
            self.max_prefix_blocks >= 1,
            f"max_prefix_blocks must be >= 1, got {self.max_prefix_blocks}",
        )
        require(
            self.lru_capacity_per_server >= 1,
            f"lru_capacity_per_server must be >= 1, got {self.lru_capacity_per_server}",
        )


class ApproxPrefixIndex:
    """``approximateprefix/indexer.go``: block hash -> endpoints, one LRU of hashes each."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.hash_to_pods: dict[int, set[str]] = {}
        self.pod_lru: dict[str, OrderedDict[int, None]] = {}

    def add(self, hashes: Sequence[int], pod: str) -> None:
        """``Add``: into the endpoint's LRU (evicting its oldest), then into hash -> endpoints."""
        lru = self.pod_lru.setdefault(pod, OrderedDict())
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            if len(lru) > self.capacity:
                old, _ = lru.popitem(last=False)
                self._drop(old, pod)
        for h in hashes:  # the source's second loop: even a hash just evicted is re-listed
            self.hash_to_pods.setdefault(h, set()).add(pod)

    def match(self, hashes: Sequence[int]) -> dict[str, int]:
        """``matchLongestPrefix``: per endpoint, the walk's blocks it holds."""
        counts: dict[str, int] = {}
        for h in hashes:
            pods = self.hash_to_pods.get(h)
            if not pods:
                break
            for pod in pods:
                counts[pod] = counts.get(pod, 0) + 1
        return counts

    def remove_pod(self, pod: str) -> None:
        """``RemovePod``: every hash of its LRU leaves hash -> endpoints."""
        for h in self.pod_lru.pop(pod, OrderedDict()):
            self._drop(h, pod)

    def _drop(self, h: int, pod: str) -> None:
        pods = self.hash_to_pods.get(h)
        if pods is not None:
            pods.discard(pod)
            if not pods:
                del self.hash_to_pods[h]


class LlmdRouter(PeerRouter[LlmdConfig]):
    """llm-d's EPP with GIE's default profile (see the module docstring). Not thread-safe."""

    name = "llm_d"
    make_options = LlmdConfig
    reads_prompt = True
    reads_kv_state = True

    def setup(self) -> None:
        self.index = ApproxPrefixIndex(self.options.lru_capacity_per_server)
        self._next_check = self._clock() + self.options.pod_check_interval_s

    def scores(self, views: Sequence[PeerView], pages: Sequence[int]) -> list[float]:
        """The weighted sum of the three scorers for every endpoint, in view order."""
        opts = self.options
        hashes = pages[: opts.max_prefix_blocks]
        matched = self.index.match(hashes)
        waiting = [v.waiting_requests for v in views]
        lo, hi = min(waiting), max(waiting)
        out = []
        for view, q in zip(views, waiting):
            queue = 1.0 if hi == lo else (hi - q) / (hi - lo)
            kv = 1.0 - view.kv_usage
            prefix = matched.get(view.replica_id, 0) / len(hashes) if hashes else 0.0
            out.append(
                opts.queue_scorer_weight * _clamp(queue)
                + opts.kv_cache_utilization_scorer_weight * _clamp(kv)
                + opts.prefix_cache_scorer_weight * _clamp(prefix)
            )
        return out

    def rank(self, views: Sequence[PeerView], request: PeerRequest) -> RouteDecision:
        """The endpoint the max-score picker takes; the index learns the prompt there."""
        if not views:
            return NO_REPLICAS
        self._sweep_if_due(views)
        scores = self.scores(views, request.prompt_pages)
        best = max(scores)
        tied = [i for i, s in enumerate(scores) if s == best]
        pick = views[tied[0] if len(tied) == 1 else self._rng.choice(tied)].replica_id
        self.index.add(request.prompt_pages[: self.options.max_prefix_blocks], pick)  # PreRequest
        return RouteDecision(((pick,),), "max_score")

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        """``CleanUpInactivePods``: endpoints that left drop out of the index; none move."""
        for pod in [p for p in self.index.pod_lru if p not in live_ids]:
            self.index.remove_pod(pod)
        return []

    def _sweep_if_due(self, views: Sequence[PeerView]) -> None:
        interval = self.options.pod_check_interval_s
        now = self._clock()
        if interval <= 0 or now < self._next_check:
            return
        self.sync_replicas({v.replica_id for v in views})
        missed = int((now - self._next_check) // interval)
        self._next_check += (missed + 1) * interval


def _clamp(score: float) -> float:
    """``enforceScoreRange``: scores outside [0, 1] are clamped."""
    return min(max(score, 0.0), 1.0)
