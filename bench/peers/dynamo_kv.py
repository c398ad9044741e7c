"""NVIDIA Dynamo's KV router (``--router-mode kv``) as a routing policy: ``dynamo_kv``.

Models the default worker selector of ai-dynamo 1.6.1 (the ``ai-dynamo`` and
``ai-dynamo-runtime`` 1.6.1 wheels): defaults from the wheel's
``dynamo/common/configuration/groups/kv_router_args.py`` and ``dynamo/_core.pyi``
(``KvRouterConfig``); the cost from ai-dynamo/dynamo
``lib/kv-router/src/scheduling/selector/default.rs`` (``DefaultWorkerScorer::worker_logit``,
``softmax_sample_index``, ``minimum_cost_index``), ``selector/mod.rs`` (the row's
``raw_prefill_blocks``: active prefill tokens + the prompt's tokens),
``sequences/multi_worker.rs`` (``potential_blocks_and_tokens``: active blocks + the
prompt's blocks not already active) and ``indexer/lower_tier.rs`` (host and disk
blocks are counted as the run that continues the device prefix), read in the
versions the source index holds (the 1.6.1 tag's commit is not in it). The cost,
its tier credits, its tie-breaking and the softmax draw were then checked against
the 1.6.1 binary itself: its in-process ``dynamo.llm.SelectionService`` fed vLLM KV
events over ZMQ and bookings (``tests/cpu/bench/peers/test_dynamo_kv.py``, run where
the wheel is importable).

Per request, for each worker (lowest cost wins)::

    prefill blocks ── (worker's active prefill tokens + prompt tokens) / block size
    overlap credit ── overlap_score_credit (1.0) x device blocks of the prompt's
                      cached prefix
                      + host_cache_hit_weight (0.75) x host (CPU) blocks extending it
                      + disk_cache_hit_weight (0.25) x disk blocks extending that
    cost ──────────── prefill_load_scale (1.0) x max(prefill - credit, 0)
                      + worker's active blocks + the prompt's blocks not active there
                      + decode_active_request_weight (0.0) x active requests
    pick ──────────── router_temperature 0 (default): the lowest cost, ties uniform
                      at random; above 0: a softmax over the min-max normalized
                      costs, ``exp(-(cost - min) / ((max - min) x temperature))``

KV events in 1.6.1 carry a storage tier (``device`` / ``host_pinned`` / ``disk``:
the event's medium, e.g. vLLM's ``GPU`` / ``CPU``, or KVBM's G1 / G2 / G3), so
host-tier blocks do count, at 0.75 each, when the engine publishes them (vLLM's
CPU offloading, KVBM); the binary check indexes ``CPU`` and ``DISK`` runs so. In
the simulator the worker's state is the replica's, exact and current:

    device / host / disk blocks ── ``PeerView.cached(prompt_pages)``: the leading
                                   run's device, host and store pages (the store is
                                   a replica's own lower tier, as KVBM's G3 disk)
    active prefill tokens ──────── ``PeerView.waiting_tokens`` (prompts queued there)
    active blocks ──────────────── ``PeerView.active_pages`` (pages of running
                                   requests) + ``waiting_tokens / page_size`` (queued
                                   prompts, which Dynamo books when it routes them)
    active requests ────────────── ``PeerView.queue_len``

Where the model differs from Dynamo:

- Tokens are pages: the prompt is ``len(prompt_pages)`` blocks; Dynamo's prompt
  tokens include the sub-page tail (a fraction of a block, the same on every
  worker). A block is the replica's page (``PeerView.page_size``).
- Dynamo's load is its own bookkeeping of what it routed: each request's
  uncached prompt tokens until its first token, its prompt blocks until it ends
  (output blocks are not tracked by default). The view has the queued prompts'
  whole token count, not the prefill left of running requests, and the pages
  running requests hold, their output included.
- The prompt's blocks "not already active" on a worker are taken as all of them
  (the view does not say which cached pages running requests hold): the same
  for every worker.
- ``CachedRun`` gives the run's pages per tier, not their order; Dynamo credits
  the host blocks that continue the device prefix and the disk blocks that
  continue those: the same when the run is device, then host, then store pages.
- No router queue (``router_queue_threshold`` is unset by default), no busy
  filter, no session affinity (off by default), no shared-cache credit
  (``shared_cache_type`` none): Dynamo's defaults. The pick goes even to a full
  replica; Dynamo does not know the replica's ``max_ongoing``.
- The 1.6.1 binary sometimes (about 1 run in 5 here) leaves a worker's host run
  unindexed when another worker's device blocks of the same prefix were indexed
  just before it; the model always credits it (the view is exact).
- Ties and softmax draws use ``random.Random(config.seed)``, Dynamo ``fastrand``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from bench.peers.base import CachedRun, PeerRequest, PeerRouter, PeerView
from penelope_engine.util import require
from router.schema import (
    NO_REPLICAS,
    RouteDecision,
)


@dataclass(frozen=True)
class DynamoKvConfig:
    """Dynamo 1.6.1 ``KvRouterConfig`` weights, with its defaults."""

    overlap_score_credit: float = 1.0  # per device block of the cached prefix
    overlap_score_credit_decay: float = 0.0  # device credit decay with excess prefill load
    host_cache_hit_weight: float = 0.75  # per host (CPU) block extending the device prefix
    disk_cache_hit_weight: float = 0.25  # per disk block extending the host run
    prefill_load_scale: float = 1.0  # on the prefill blocks left after the credit
    decode_active_request_weight: float = 0.0  # block-equivalents per active request
    router_temperature: float = 0.0  # 0: the lowest cost; else softmax sampling

    def __post_init__(self) -> None:
        for name in (
            "overlap_score_credit",
            "overlap_score_credit_decay",
            "prefill_load_scale",
            "decode_active_request_weight",
            "router_temperature",
        ):
            value = getattr(self, name)
            require(
                math.isfinite(value) and value >= 0.0, f"{name} must be finite, >= 0, got {value}"
            )
        for name in ("host_cache_hit_weight", "disk_cache_hit_weight"):
            value = getattr(self, name)
            require(0.0 <= value <= 1.0, f"{name} must be in [0, 1], got {value}")


class DynamoKvRouter(PeerRouter[DynamoKvConfig]):
    """Dynamo's default KV worker selector (see the module docstring)."""

    name = "dynamo_kv"
    make_options: ClassVar[Callable[[], DynamoKvConfig]] = DynamoKvConfig
    reads_prompt = True
    reads_kv_state = True

    def costs(self, views: Sequence[PeerView], pages: Sequence[int]) -> list[float]:
        """``worker_logit`` of every worker, in view order."""
        floor = min(v.waiting_tokens for v in views) if views else 0  # min_active_prefill_tokens
        return [self.cost(v, pages, floor) for v in views]

    def cost(self, view: PeerView, pages: Sequence[int], floor_tokens: int = 0) -> float:
        """One worker's ``worker_logit``; `floor_tokens` is the least active prefill of
        any worker (it matters only with ``overlap_score_credit_decay``)."""
        opts = self.options
        bs = view.page_size
        blocks = len(pages)
        run = view.cached(pages) if view.cached is not None and pages else CachedRun()
        prefill = (view.waiting_tokens + blocks * bs) / bs  # raw_prefill_blocks
        decay = 1.0
        if opts.overlap_score_credit_decay > 0.0:  # default.rs: rational decay of device credit
            excess = (view.waiting_tokens - floor_tokens) / bs / max(blocks, 1)
            decay = 1.0 / (1.0 + opts.overlap_score_credit_decay * excess)
        credit = (
            opts.overlap_score_credit * decay * run.device
            + opts.host_cache_hit_weight * run.host
            + opts.disk_cache_hit_weight * run.store
        )
        active = view.active_pages + view.waiting_tokens / bs + blocks  # potential_decode_blocks
        return (
            opts.prefill_load_scale * max(prefill - credit, 0.0)
            + active
            + opts.decode_active_request_weight * view.queue_len
        )

    def rank(self, views: Sequence[PeerView], request: PeerRequest) -> RouteDecision:
        """The one worker the selector picks, as the only rank."""
        if not views:
            return NO_REPLICAS
        costs = self.costs(views, request.prompt_pages)
        return RouteDecision(((views[self._pick(costs)].replica_id,),), "kv")

    def _pick(self, costs: Sequence[float]) -> int:
        """``minimum_cost_index`` at temperature 0, else ``softmax_sample_index``."""
        temperature = self.options.router_temperature
        if temperature == 0.0:
            best = min(costs)
            tied = [i for i, c in enumerate(costs) if c == best]
            return tied[0] if len(tied) == 1 else self._rng.choice(tied)
        lo, hi = min(costs), max(costs)
        if lo == hi:
            weights = [1.0] * len(costs)
        else:
            scale = -1.0 / ((hi - lo) * temperature)
            weights = [math.exp(c * scale - lo * scale) for c in costs]
        total = sum(weights)
        sample, cumulative = self._rng.random(), 0.0
        for i, w in enumerate(weights):
            cumulative += w / total
            if sample <= cumulative:
                return i
        return len(costs) - 1
