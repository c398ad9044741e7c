"""Ray Serve LLM's token-load KV-aware router as a routing policy: ``ray_kv_aware``.

Models ``KVAwareRouter`` of ``ray/llm/_internal/serve/routing_policies/kv_aware/``
(``kv_aware_router.py``, ``kv_token_tracker.py``, ``vllm/kv_events.py``,
``vllm/token_tracking.py``), Ray 2.60.0. Ray's router is a thin wrapper: it hands
the prompt's token ids and every candidate replica (as a Dynamo worker id) to a
``KVTokenTracker``, whose Dynamo ``SelectionService`` scores and books a worker
(``select_and_reserve``); the router returns that replica as its only rank. The
score is Dynamo's ``DefaultWorkerSelector`` (ai-dynamo/dynamo
``lib/kv-router/src/scheduling/selector.rs`` at 01690d42e3b9436ab3a6a365fc9beabf58c105c6,
``worker_logit``; defaults from ``scheduling/config.rs``, ``KvRouterConfig::default``;
Ray 2.60.0 pins no ai-dynamo release), lowest wins::

    overlap credit ── 1.0 x device blocks of the prompt's cached prefix
                      + 0.75 x host-pinned (CPU) blocks extending it
                      + 0.25 x disk blocks extending it
    prefill blocks ── (worker's active prefill tokens + prompt tokens) / block size
    logit ─────────── max(prefill blocks - overlap credit, 0)
                      + worker's active blocks + the prompt's blocks not already
                        active there
    pick ──────────── the lowest logit, ties at random (router_temperature 0;
                      above 0 a softmax over the normalized logits)
    routed ────────── the pick, even if full: Ray waits for it and asks again

What Dynamo reads comes from the engines: vLLM's KV events (blocks stored and
removed, per tier; Ray turns on vLLM's native CPU-offload events so host
blocks are indexed) feed a radix index of which worker holds which block, and
the router's own bookings plus each replica's lifecycle events (first token:
prefill done; end: freed) give each worker's active prefill tokens and active
blocks. In the simulator these are the replica's exact current state:

    device / host blocks ─── ``ReplicaView.cached(prompt_pages)``: the leading run's
                             device pages and host pages
    active prefill tokens ── ``ReplicaView.waiting_tokens`` (prompts queued there)
    active blocks ────────── ``ReplicaView.active_pages`` (pages of running requests)
                             + ``waiting_tokens / page_size`` (queued prompts,
                             which Dynamo books at selection)

Where the model differs from Ray and Dynamo:

- Tokens are pages: the prompt is ``len(prompt_pages)`` blocks; the sub-page tail
  Dynamo counts as a fraction of a block is not seen (it adds the same amount to
  every replica's prefill term). A block is the replica's page
  (``ReplicaView.page_size``): queued prompts, counted in tokens, become blocks
  with it.
- ``CachedRun`` gives the run's pages per tier, not their order: device pages are
  credited as Dynamo's device prefix and host pages as its host extension (the
  same when the run is device pages then host pages, as an offloaded run is).
  Store pages get ``store_hit_weight``, 0 by default: Ray's wiring emits only
  GPU and vLLM-native CPU-offload events, so Dynamo's disk weight never applies.
- Active prefill tokens: Dynamo counts each booked request's uncached prompt
  tokens until its first token; the view has the queued prompts' whole token
  count and not the prefill left of running requests.
- Active blocks: Dynamo counts the unique prompt blocks of booked requests (and
  no output blocks: Ray's decode-progress events are off by default); the view's
  ``active_pages`` are the pages running requests own. The prompt's blocks "not
  already active" on a replica are taken as all of them (the view does not say
  which cached pages running requests hold): the same for every replica.
- Dynamo's other knobs are at their defaults and drop out: no overlap-credit
  decay, no per-request active weight, no shared-cache credit, no router queue
  (it holds requests only when every worker has 16 x max_num_batched_tokens of
  prefill pending), no busy filter.
- A request with no full page is scored (Ray scores any non-empty prompt); Ray's
  random pick for requests without token ids never happens in the simulator.
- Ties and softmax draws use ``random.Random(config.seed)``, Dynamo ``fastrand``.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from penelope_engine.util import require
from router.schema import (
    NO_REPLICAS,
    CachedRun,
    Choice,
    ReplicaView,
    RouteDecision,
    RouterConfig,
    RouteRequest,
)


@dataclass(frozen=True)
class RayKvAwareConfig:
    """Dynamo ``KvRouterConfig`` weights, with its defaults, and the simulator's block size."""

    overlap_score_credit: float = 1.0  # per device block of the cached prefix
    host_cache_hit_weight: float = 0.75  # per host (CPU) block extending it
    store_hit_weight: float = 0.0  # per store block (Dynamo's disk weight is 0.25; never fed)
    prefill_load_scale: float = 1.0  # on the prefill blocks left after the credit
    router_temperature: float = 0.0  # 0: the lowest logit; else softmax sampling

    def __post_init__(self) -> None:
        require(
            0.0 <= self.overlap_score_credit <= 1.0,
            f"overlap_score_credit must be in [0, 1], got {self.overlap_score_credit}",
        )
        for name in ("host_cache_hit_weight", "store_hit_weight"):
            value = getattr(self, name)
            require(0.0 <= value <= 1.0, f"{name} must be in [0, 1], got {value}")
        require(
            self.prefill_load_scale >= 0.0,
            f"prefill_load_scale must be >= 0, got {self.prefill_load_scale}",
        )
        require(
            self.router_temperature >= 0.0,
            f"router_temperature must be >= 0, got {self.router_temperature}",
        )


class RayKvAwareRouter:
    """Ray Serve LLM's ``KVAwareRouter`` with Dynamo's default cost (see the module docstring)."""

    name = "ray_kv_aware"
    reads_prompt = True
    reads_kv_state = True

    def __init__(
        self,
        config: RouterConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        options: RayKvAwareConfig | None = None,
    ) -> None:
        self.config = config if config is not None else RouterConfig()
        self.options = options if options is not None else RayKvAwareConfig()
        self._rng = random.Random(self.config.seed)

    def logit(self, view: ReplicaView, pages: Sequence[int]) -> float:
        """Dynamo's ``worker_logit`` for one replica: prefill left after the credit + load."""
        opts = self.options
        run = view.cached(pages) if view.cached is not None and pages else CachedRun()
        queued_blocks = view.waiting_tokens / view.page_size
        credit = (
            opts.overlap_score_credit * run.device
            + opts.host_cache_hit_weight * run.host
            + opts.store_hit_weight * run.store
        )
        prefill = opts.prefill_load_scale * max(queued_blocks + len(pages) - credit, 0.0)
        return prefill + view.active_pages + queued_blocks + len(pages)

    def rank(self, views: Sequence[ReplicaView], request: RouteRequest) -> RouteDecision:
        """``select_worker``: the one replica Dynamo picks, as Ray's only rank."""
        if not views:
            return NO_REPLICAS
        logits = [self.logit(v, request.prompt_pages) for v in views]
        return RouteDecision(((views[self._pick(logits)].replica_id,),), "kv")

    def choose(self, views: Sequence[ReplicaView], request: RouteRequest) -> Choice:
        """The pick, full or not: Ray waits for it (one rank, no fallback)."""
        decision = self.rank(views, request)
        if not decision.ranks:
            raise ValueError("cannot pick a replica: there are none")
        return Choice(decision.ranks[0][0], decision)

    def remember(self, session_id: str, replica_id: str, reported: bool = False) -> None:
        """Dynamo learns placements from KV events (the views), not from the router."""

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        """Workers follow the live replicas through the views; there are no sessions to move."""
        return []

    def _pick(self, logits: Sequence[float]) -> int:
        """Dynamo's picker: the minimum (ties uniform), or a softmax draw above temperature 0."""
        temperature = self.options.router_temperature
        if temperature == 0.0:
            best = min(logits)
            tied = [i for i, x in enumerate(logits) if x == best]
            return tied[0] if len(tied) == 1 else self._rng.choice(tied)
        lo, hi = min(logits), max(logits)
        if lo == hi:
            weights = [1.0] * len(logits)
        else:
            scale = -1.0 / ((hi - lo) * temperature)
            weights = [math.exp(x * scale - lo * scale) for x in logits]
        total = sum(weights)
        sample, cumulative = self._rng.random(), 0.0
        for i, w in enumerate(weights):
            cumulative += w / total
            if sample <= cumulative:
                return i
        return len(logits) - 1
