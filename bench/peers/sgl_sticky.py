"""sgl-router's ``manual`` policy (sticky sessions) keyed on the session: ``sgl_sticky``.

Models ``ManualPolicy`` of sglang-router 0.3.2 (the SGLang Model Gateway wheel,
built 2026-01-15; the binary names ``src/policies/manual.rs``):
``src/policies/manual.rs``, ``src/policies/mod.rs`` (``get_healthy_worker_indices``),
``src/routers/header_utils.rs`` (``X-SMG-Routing-Key``) and
``src/routers/http/router.rs`` (``select_worker_for_model``) at lightseekorg/smg
4e108ef08197b42580768de054cf6e5ea5da1344, the commit ``sgl_cache_aware`` pins;
defaults from the wheel's ``sglang_router/router_args.py`` (``--policy manual``,
``--assignment-mode random``, ``--max-idle-secs`` 14400, ``--eviction-interval-secs``
60). 0.3.2's Python launcher offers ``random``, ``round_robin``, ``cache_aware``,
``power_of_two`` and ``manual``; ``manual`` is its sticky-session policy (the
Rust ``consistent_hashing`` policy is not offered by the launcher). The routing
key is the ``X-SMG-Routing-Key`` header; here it is the session id. The rules
below were checked against the 0.3.2 binary itself (``launch_router --policy
manual`` over stub workers, ``tests/cpu/bench/peers/test_sgl_sticky.py``, run
where the wheel is importable): sessions spread at random, stick, move when
their worker is deleted, and return to it when it is added back.

Per request (``select_worker_impl`` and ``select_by_routing_id``)::

    no routing key ──── a new worker (below); nothing is remembered ("no_routing_id")
    key not seen ────── a new worker; remember [worker] for the key ("vacant")
    key seen ────────── its last access := now; the first of its remembered
                        workers (at most 2, oldest first) that is live and
                        healthy ("occupied_hit"); if none is, a new worker,
                        appended to the list (the oldest dropped past 2)
                        ("occupied_miss")
    a new worker ────── assignment_mode random (default): uniform over the live,
                        healthy workers, load ignored; min_load: the fewest
                        requests in flight, ties uniform at random
    eviction ────────── every eviction_interval_s, keys idle max_idle_s or
                        longer are forgotten

Load never moves a session: a remembered worker is kept however busy or full
it is (the HTTP router sends to it; there is no load check in the policy).
Because the list is searched oldest first, a session whose first worker comes
back after a failover returns to it.

Where the model differs from the source:

- Workers are the views' replicas: "live and healthy" is "in the view" (the
  source also drops unhealthy workers and ones whose circuit breaker is open;
  the simulator has neither). A replica that leaves is noticed at the
  session's next request, as in the source; ``sync_replicas`` moves nothing.
- ``min_load`` reads ``PeerView.queue_len`` for the router's in-flight count;
  ``min_group`` (fewest routing keys with requests in flight) is not modelled:
  the view does not say which sessions have requests in flight.
- Draws use ``random.Random(config.seed)``, the source ``rand::rng()``.
- The eviction thread's work runs at the first request at or after each tick
  of the policy's clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.peers.base import PeerRequest, PeerRouter, PeerView
from penelope_engine.util import require
from router.schema import (
    NO_REPLICAS,
    RouteDecision,
)

MAX_CANDIDATE_WORKERS = 2  # manual.rs: MAX_CANDIDATE_WORKERS
ASSIGNMENT_MODES = ("random", "min_load")


@dataclass(frozen=True)
class SglStickyConfig:
    """The ``manual`` policy's knobs, with sglang_router 0.3.2's CLI defaults."""

    assignment_mode: str = "random"  # --assignment-mode (min_group is not modelled)
    max_idle_s: float = 4 * 3600.0  # --max-idle-secs; 0: never evict
    eviction_interval_s: float = 60.0  # --eviction-interval-secs; 0: never evict

    def __post_init__(self) -> None:
        require(
            self.assignment_mode in ASSIGNMENT_MODES,
            f"assignment_mode must be one of {ASSIGNMENT_MODES}, got {self.assignment_mode!r}",
        )
        require(self.max_idle_s >= 0.0, f"max_idle_s must be >= 0, got {self.max_idle_s}")
        require(
            self.eviction_interval_s >= 0.0,
            f"eviction_interval_s must be >= 0, got {self.eviction_interval_s}",
        )


@dataclass
class _Node:
    """A routing key's remembered workers (oldest first) and last access (manual.rs ``Node``)."""

    workers: list[str]
    last_access: float
    last_routed: str  # the worker it was last sent to (for ``rehomed_from``)

    def push_bounded(self, replica_id: str) -> None:
        while len(self.workers) >= MAX_CANDIDATE_WORKERS:
            self.workers.pop(0)
        self.workers.append(replica_id)


class SglStickyRouter(PeerRouter[SglStickyConfig]):
    """sgl-router's ``manual`` policy on the session id (see the module docstring)."""

    name = "sgl_sticky"
    make_options = SglStickyConfig

    def setup(self) -> None:
        self.routing_map: dict[str, _Node] = {}
        self._next_eviction = self._clock() + self.options.eviction_interval_s

    def rank(self, views: Sequence[PeerView], request: PeerRequest) -> RouteDecision:
        """The one worker ``select_worker`` picks; the key's memory is updated as it is."""
        if not views:
            return NO_REPLICAS  # no_healthy_workers: the source returns no worker
        self._evict_if_due()
        key = request.session_id
        if not key:  # an absent or empty header is no routing key (header_utils.rs)
            return RouteDecision(((self._new_worker(views),),), "no_routing_id")
        live = {v.replica_id for v in views}
        now = self._clock()
        node = self.routing_map.get(key)
        if node is None:
            replica_id = self._new_worker(views)
            self.routing_map[key] = _Node([replica_id], now, replica_id)
            return RouteDecision(((replica_id,),), "vacant")
        node.last_access = now
        held = next((w for w in node.workers if w in live), None)
        if held is not None:
            node.last_routed = held
            return RouteDecision(((held,),), "occupied_hit")
        replica_id = self._new_worker(views)
        node.push_bounded(replica_id)
        gone, node.last_routed = node.last_routed, replica_id
        return RouteDecision(((replica_id,),), "occupied_miss", rehomed_from=gone)

    def _new_worker(self, views: Sequence[PeerView]) -> str:
        """``select_new_worker``: uniform (random) or the least loaded, ties uniform (min_load)."""
        if self.options.assignment_mode == "min_load":
            low = min(v.queue_len for v in views)
            tied = [v for v in views if v.queue_len == low]
            return tied[0].replica_id if len(tied) == 1 else self._rng.choice(tied).replica_id
        return views[self._rng.randrange(len(views))].replica_id

    def _evict_if_due(self) -> None:
        interval, max_idle = self.options.eviction_interval_s, self.options.max_idle_s
        now = self._clock()
        if interval <= 0 or max_idle <= 0 or now < self._next_eviction:
            return
        missed = int((now - self._next_eviction) // interval)
        tick = self._next_eviction + missed * interval  # the latest tick: nothing ran since
        self.routing_map = {  # manual.rs: retain while now - last_access < max_idle
            k: n for k, n in self.routing_map.items() if tick - n.last_access < max_idle
        }
        self._next_eviction = tick + interval
