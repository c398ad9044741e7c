"""Ray Serve LLM's token-load KV-aware router as a routing policy: ``ray_kv_aware``.

Models ``KVAwareRouter`` of ``ray/llm/_internal/serve/routing_policies/kv_aware/``
(``kv_aware_router.py``, ``kv_token_tracker.py``, ``vllm/kv_events.py``,
``vllm/token_tracking.py``), Ray 2.60.0. Ray's router is a thin wrapper: it hands
the prompt's token ids and every candidate replica (as a Dynamo worker id) to a
``KVTokenTracker``, whose Dynamo ``SelectionService`` scores and books a worker
(``select_and_reserve``); the router returns that replica as its only rank. The
score is Dynamo's ``DefaultWorkerSelector`` (``worker_logit``; Ray 2.60.0 pins no
ai-dynamo release), modelled once in ``bench.peers.dynamo_kv``; this router is that
model with Ray's wiring. Lowest wins::

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

    device / host blocks ─── ``PeerView.cached(prompt_pages)``: the leading run's
                             device pages and host pages
    active prefill tokens ── ``PeerView.waiting_tokens`` (prompts queued there)
    active blocks ────────── ``PeerView.active_pages`` (pages of running requests)
                             + ``waiting_tokens / page_size`` (queued prompts,
                             which Dynamo books at selection)

Where the model differs from Ray and Dynamo:

- Tokens are pages: the prompt is ``len(prompt_pages)`` blocks; the sub-page tail
  Dynamo counts as a fraction of a block is not seen (it adds the same amount to
  every replica's prefill term). A block is the replica's page
  (``PeerView.page_size``): queued prompts, counted in tokens, become blocks
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

from collections.abc import Sequence

from bench.peers.base import PeerView
from bench.peers.dynamo_kv import DynamoKvConfig, DynamoKvRouter

# Ray feeds Dynamo GPU and vLLM-native CPU-offload events only: no disk blocks.
RAY_DYNAMO_CONFIG = DynamoKvConfig(disk_cache_hit_weight=0.0)


class RayKvAwareRouter(DynamoKvRouter):
    """Ray Serve LLM's ``KVAwareRouter``: Dynamo's default selector over GPU and CPU blocks,
    its single pick as the only rank (Ray waits for it when it is full)."""

    name = "ray_kv_aware"

    make_options = staticmethod(lambda: RAY_DYNAMO_CONFIG)  # Ray's wiring, not Dynamo's defaults

    def logit(self, view: PeerView, pages: Sequence[int]) -> float:
        """Dynamo's ``worker_logit`` for one replica (no credit decay: the floor drops out)."""
        return self.cost(view, pages)
