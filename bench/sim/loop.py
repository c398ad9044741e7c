"""Discrete-event simulation of agent sessions on replicas of the Penelope cache.

Sessions start at the workload's times; turn k+1 of a session arrives
`think_time_s` after turn k's last output token (closed loop), and a subagent
starts its delay after the parent turn it follows. Each arrival is routed by
the real routing core (`router.policies`: `pow2` or `affinity`) from live
queue lengths and digests refreshed every `digest_period_s` (as Ray Serve
pulls `record_routing_stats`). Each replica runs the engine's scheduling core
(`bench.sim.replica.Replica`) over the real `PrefixCache`; time comes from a
`bench.sim.costmodel` model.

The oracle policy is told, at the end of each turn, when that session's next
turn will arrive (at any replica), or that it never will. In hint mode
(`SimConfig.hints`) a harness sends, at the end of each turn, the hints it can
know then (`bench.sim.hints`: a noised gap after a tool call, the end after
the last reply) to the replica that ran it, as the session endpoint does.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.peers.base import PeerRequest, PeerView, reads_kv_state, reads_prompt
from bench.peers.registry import make_sim_router
from bench.sessions import TOOLS, Session
from bench.sim.config import SimConfig
from bench.sim.copyrates import COPY_RATES, MeasuredCopies
from bench.sim.costmodel import CostModel, ttft_floor, turn_floor
from bench.sim.hints import TraceHints, next_gap
from bench.sim.metrics import RequestRecord, RunMetrics, SessionRecord, summarize
from bench.sim.oracle import tell_next_arrival
from bench.sim.replica import Replica, Step
from bench.sim.tiers import FreeCopies
from bench.sim.turns import SessionState, SimRequest, make_request
from bench.tokens import TokenMap
from bench.workload import Workload
from penelope_engine.protocol import DIGEST_LIMITS
from router.digest import build_digest, decode_digest
from router.schema import ROUTE_PREFIX_PAGES, RouterConfig

if TYPE_CHECKING:
    from penelope_engine.core import BenchHooks, CoreHooks
    from penelope_engine.engine import Engine


class Simulator:
    """The event loop over simulated replicas, or over real engines on simulated time.

    With `engines`, replica i is the engine `engines[i](hooks, bench)` builds with the
    hooks that put its core on this loop's clock (`Replica.engine_hooks`,
    `Replica.over_engine`): its own scheduler, cache, tiers and model; `cfg`'s
    cache and scheduler settings are then the engines' own and are not used.
    """

    def __init__(
        self,
        workload: Workload,
        cfg: SimConfig,
        cost: CostModel,
        seed: int = 0,
        engines: Sequence[Callable[[CoreHooks, BenchHooks], Engine]] | None = None,
    ) -> None:
        self.cfg, self.cost, self.workload = cfg, cost, workload
        if cfg.free_copies:
            cost = FreeCopies(cost)  # the replicas' copies; the floors keep the real cost
        elif cfg.copy_rates is not None:  # the copies as the engine was measured to make them
            cost = MeasuredCopies(cost, COPY_RATES.get(cfg.copy_rates), cfg.copy_rates)
        self.now = 0.0
        clock: Callable[[], float] = lambda: self.now  # noqa: E731
        if engines is not None:
            if len(engines) != cfg.replicas:
                raise ValueError(f"{len(engines)} engines for {cfg.replicas} replicas")
            hooks, bench = Replica.engine_hooks(cost, clock, cfg.page_size)
            self.replicas = [
                Replica.over_engine(i, make(hooks, bench), cost) for i, make in enumerate(engines)
            ]
        else:
            self.replicas = [
                Replica.simulated(
                    i,
                    cfg.cache_config(),
                    cfg.policy,
                    cfg.scheduler,
                    cost,
                    clock,
                    has_store=cfg.tiers == "gpu+cpu+store",
                    layerwise_loads=cfg.layerwise_loads,
                    async_writes=cfg.async_writes,
                    async_spills=cfg.async_spills,
                    fast_decode=cfg.fast_decode,
                )
                for i in range(cfg.replicas)
            ]
        self.router = make_sim_router(
            cfg.router, RouterConfig(seed=seed, prefix_affinity=cfg.prefix_affinity), clock
        )
        self.tokens = TokenMap(cfg.vocab_size)
        self.hints = TraceHints(cfg.hint_noise, seed) if cfg.hints else None
        self.hasher = self.replicas[0].hasher  # one namespace for the whole fleet
        self.states = {s.id: SessionState(s) for s in workload.all_sessions}
        self._heap: list[tuple[float, int, str, Any]] = []
        self._arrivals: list[float] = []  # times of pending arrivals (decode runs end there)
        self._seq = itertools.count()
        self._digests = [decode_digest({}) for _ in self.replicas]
        self._digest_at = -math.inf
        self._wakes: dict[int, float] = {}
        self._floors: dict[str, float] = {}
        self.requests: list[RequestRecord] = []
        self.sessions: list[SessionRecord] = []
        self.failed = 0

    # -- events ---------------------------------------------------------------------------
    def _push(self, t: float, kind: str, data: Any) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, data))
        if kind == "arrive":
            heapq.heappush(self._arrivals, t)

    def run(self) -> RunMetrics:
        wall = time.perf_counter()
        for s, t in zip(self.workload.sessions, self.workload.starts):
            self._push(t, "arrive", (s.id, 0))
            for child in self.workload.children.get(s.id, ()):
                if child.after_turn < 0:
                    self._push(t + child.start_delay_s, "arrive", (child.id, 0))
        handlers: dict[str, Callable[[Any], None]] = {
            "arrive": self._arrive,
            "step": self._step_done,
            "wake": self._wake,
        }
        while self._heap:
            t, _, kind, data = heapq.heappop(self._heap)
            self.now = t
            handlers[kind](data)
        stuck = sum(r.queue_len for r in self.replicas)
        if stuck:
            raise RuntimeError(f"simulation ended with {stuck} requests never served")
        return summarize(
            self.requests, self.sessions, self.failed, self.now, time.perf_counter() - wall
        )

    def _horizon(self) -> float:
        """The next arrival: nothing else can change a replica during its decode run (other
        replicas' steps only schedule arrivals, and an arrival routed here cuts the run)."""
        return self._arrivals[0] if self._arrivals else math.inf

    def _kick(self, rep: Replica) -> None:
        while not rep.busy:
            step = rep.plan(self.now, self._horizon())
            if step is not None:
                rep.busy = True
                rep.current = step
                self._push(step.end, "step", (rep, step))
                return
            ready = rep.next_ready()
            if ready is not None and ready > self.now:
                if self._wakes.get(rep.index) != ready:
                    self._wakes[rep.index] = ready
                    self._push(ready, "wake", rep)
                return
            stuck = rep.fail_stuck(self.now)  # every page held: the engine fails the newest
            if stuck is None:
                return
            self.failed += 1
            self._turn_over(self.states[stuck.session_id], stuck.turn)

    def _wake(self, rep: Replica) -> None:
        self._kick(rep)

    def _views(self) -> list[PeerView]:
        """Live queue lengths; digests as of the last `digest_period_s` boundary's refresh.

        A digest is rebuilt when a route needs it and it is a period old, which
        shows the router what a periodic pull would have shown, give or take
        one period. `pow2` reads no digest, so none is built for it.
        """
        if self.cfg.router != "pow2" and self.now >= self._digest_at + self.cfg.digest_period_s:
            self._digest_at = self.now
            for i, rep in enumerate(self.replicas):
                wire = build_digest(
                    rep.sessions.digests(rep.page_size, DIGEST_LIMITS.sessions),
                    rep.cache.shared_prefix_hashes(DIGEST_LIMITS.prefix_pages),
                    queue_len=rep.queue_len,
                    now=self.now,
                )
                self._digests[i] = decode_digest(wire)
        live = reads_kv_state(self.router)
        return [
            PeerView(
                str(r.index),
                r.queue_len,
                self.cfg.max_ongoing,
                self._digests[i],
                kv_usage=r.kv_usage if live else 0.0,
                active_pages=r.scheduler.request_pages() if live else 0,
                waiting_tokens=r.waiting_tokens() if live else 0,
                waiting_requests=len(r.scheduler.waiting) if live else 0,
                cached=r.cached_run if live else None,
                page_size=r.page_size,
            )
            for i, r in enumerate(self.replicas)
        ]

    # -- a turn arrives -------------------------------------------------------------------
    def _arrive(self, data: tuple[str, int]) -> None:
        heapq.heappop(self._arrivals)  # this one: arrivals are handled in time order
        sid, k = data
        st = self.states[sid]
        if st.start is None:
            st.start = self.now
        req = self._request(st, k)
        rep = self.replicas[0]
        if not rep.fits(req.prompt_len, req.output_len):
            self.failed += 1
            self._turn_over(st, k)
            return
        views = self._views()
        prefix = tuple(int(h) for h in req.hashes[:ROUTE_PREFIX_PAGES])
        pages = self._router_pages(st.session, req) if reads_prompt(self.router) else ()
        choice = self.router.choose(
            views, PeerRequest(sid, prefix, request_id=f"{sid}:{k}", prompt_pages=pages)
        )
        rep = self.replicas[int(choice.replica_id)]
        rep.enqueue(req, self.now)
        cut = rep.truncate(self.now) if rep.busy else None
        if cut is not None:
            self._push(cut.end, "step", (rep, cut))
        self._kick(rep)

    def _router_pages(self, s: Session, req: SimRequest) -> tuple[int, ...]:
        """The prompt's full-page hashes as a text-matching router sees them: without the
        tool schemas, which an OpenAI request carries beside its messages (the engine's
        pages, `req.hashes`, include them where the chat template puts them)."""
        start, end = self.tokens.block_span(s, req.turn, TOOLS)
        if start == end:
            return tuple(req.hashes.tolist())
        prompt = req.tokens[: req.prompt_len]
        return tuple(self.hasher.hashes(np.concatenate([prompt[:start], prompt[end:]])).tolist())

    def _request(self, st: SessionState, k: int) -> SimRequest:
        return make_request(st, k, self.now, self.tokens, self.hasher, self.cfg.page_size)

    # -- a step ends ----------------------------------------------------------------------
    def _step_done(self, data: tuple[Replica, Step]) -> None:
        rep, step = data
        if step.stale:
            return
        rep.busy = False
        rep.current = None
        for req in rep.commit(step):
            st = self.states[req.session_id]
            assert req.seq is not None
            assert st.raw is not None
            st.last = (st.raw, req.seq.token_array(len(req.seq.tokens)))
            due = self.now + next_gap(st.session, req.turn)
            tell_next_arrival(rep.cache, rep.sessions, req.session_id, due)
            hints = self.hints.after_turn(st.session, req.turn) if self.hints else None
            if hints is not None:  # the harness, once the reply is in (the session endpoint)
                grants = rep.scheduler.session_hints(req.session_id, req.seq.req.tenant, hints)
                req.seq.hint_grants.extend(grants)  # reported with the turn they follow
            self._record(req)
            self._turn_over(st, req.turn)
        self._kick(rep)

    def _record(self, r: SimRequest) -> None:
        ps = self.cfg.page_size
        known = max(r.reusable_pages, r.shared_pages) * ps
        floor = turn_floor(self.cost, r.prompt_len, known, r.output_len)
        self._floors[r.session_id] = self._floors.get(r.session_id, 0.0) + floor
        self.requests.append(r.record(ps, ttft_floor(self.cost, r.prompt_len, known)))

    def _turn_over(self, st: SessionState, k: int) -> None:
        s = st.session
        for child in self.workload.children.get(s.id, ()):
            if child.after_turn == k:
                self._push(self.now + child.start_delay_s, "arrive", (child.id, 0))
        if k + 1 < len(s.turns):
            self._push(self.now + s.turns[k + 1].think_time_s, "arrive", (s.id, k + 1))
        else:
            assert st.start is not None
            floor = self._floors.pop(s.id, 0.0)
            self.sessions.append(SessionRecord(s.id, st.start, self.now, s.tool_time_s, floor))


def simulate(workload: Workload, cfg: SimConfig, cost: CostModel, seed: int = 0) -> RunMetrics:
    return Simulator(workload, cfg, cost, seed).run()
