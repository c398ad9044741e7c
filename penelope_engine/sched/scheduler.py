"""The scheduling core: continuous batching with chunked prefill over the Penelope cache.

One implementation for the engine and the simulator. The engine drives it with
the real model runner and real tiers; `bench.sim` drives it with a cost model's
clock, scripted tokens and tiers that only time their copies. Torch-free.

Each step carries every running decode (one token each), then continues
prefills, then admits waiting requests in queue order (`intake`: arrival by
default; the agent-aware orders, backfill and KV retention of `agent` are
levers of `SchedulerConfig.agent`), within the step's token budget and
`max_prefills`. A prefill takes at most `prefill_chunk` tokens a step, or
`solo_prefill_chunk` when it runs alone (nothing else in the step, running or
queued).
Admission matches the prompt against the tree, locks the matched path,
allocates device pages for everything not on the device (only when they
can be had: a request that does not fit evicts nothing), loads host and
store pages the planner chooses to load, and queues the rest
(holes, failed loads, new tokens) as query positions of a fused prefill.
Decode pages are allocated as decoding goes, preempting the newest running
request when none is left. A request's prefill starts once its copies are
done (`Sequence.ready_at`, from the tiers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.request_life import RequestLife
from penelope_engine.cache.session_book import Sessions
from penelope_engine.config import SchedulerConfig
from penelope_engine.errors import CapacityError
from penelope_engine.hints import HintGrant, SessionHints
from penelope_engine.protocol import TokenUsage
from penelope_engine.sched.admission import insert_path, release
from penelope_engine.sched.agent import Retention, WaitingQueue
from penelope_engine.sched.hinted import HintedSessions, HintQuotas
from penelope_engine.sched.intake import Intake
from penelope_engine.sched.prefetch import Prefetcher
from penelope_engine.sched.records import SessionRecords
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.contract import SchedulerTiers
from penelope_engine.tiers.planner import PlannerCost


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        cache: PrefixCache,
        sessions: Sessions,
        hasher: PageHasher,
        tiers: SchedulerTiers,
        cost: Callable[[], PlannerCost],
        eos_token_ids: tuple[int, ...],
        max_model_len: int,
        write_through: bool = True,
        clock: Callable[[], float] = time.monotonic,
        hint_quotas: HintQuotas | None = None,
        turn_stop: Callable[[Sequence], str | None] | None = None,
        on_forget: Iterable[Callable[[list[str]], None]] = (),
    ) -> None:
        """`sessions`: the book `cache` was built over; `on_forget`: told the ids of
        sessions whose records are dropped (after the scheduler's own parts)."""
        self.config = config
        # How a finished request's turn ended ("tool_use", "end_turn" or None): the
        # request's hint by default; the engine also reads the reply (`Engine.turn_stop`).
        self._turn_stop = turn_stop or (lambda seq: seq.req.stop_reason_hint)
        self._cache = cache
        self._sessions = sessions
        self._life = RequestLife(cache, sessions)
        self._hasher = hasher  # page ids
        self._tiers = tiers
        self._cost = cost  # the planner's current cost model (the engine refines its own)
        self.eos = frozenset(eos_token_ids)
        self.max_model_len = max_model_len
        self._write_through = write_through
        self._clock = clock
        self.page_size = cache.page_size
        self.agent = config.agent
        self.running: list[Sequence] = []
        self._retention = Retention(config.agent, cache, sessions)
        self._records = SessionRecords(cache, sessions, self._retention)
        quotas = hint_quotas or HintQuotas()
        self._hinted = HintedSessions(quotas, cache, sessions, self._retention)
        self._intake = Intake(config.agent, self._life, tiers, cost, self._retention, self._hinted)
        self._prefetch = Prefetcher(config.agent.prefetch_lead_s, cache, sessions, tiers, cost)
        for forget in (self._prefetch.forget, self._hinted.forget, *on_forget):
            self._records.listen(forget)

    # -- queue ------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        self._intake.add(seq)

    @property
    def waiting(self) -> WaitingQueue:
        return self._intake.waiting

    @property
    def totals(self) -> TokenUsage:
        """Tokens by source over every request's first admission."""
        return self._intake.totals

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def request_pages(self) -> int:
        return sum(s.owned_pages for s in self.running)

    # -- scheduling --------------------------------------------------------------
    def schedule(self) -> list[BatchItem]:
        now = self._clock()
        budget = self.config.max_batch_tokens
        items: list[BatchItem] = []
        for seq in [s for s in self.running if not s.in_prefill]:
            if seq not in self.running:  # preempted below for an older sequence
                continue
            if budget and self._page_for_decode(seq):
                items.append(BatchItem(seq, np.array([len(seq.tokens) - 1]), True))
                budget -= 1
        for seq in [s for s in self.running if s.in_prefill]:
            budget -= self._take_chunk(seq, budget, items, now)
        if self._retention.expire(now):
            self._intake.note_release()
        self._prefetch.step(now, self._live_sessions())
        while budget > 0 and self.waiting and self._may_admit():
            new = self._intake.next_admitted(now)
            if new is None:
                break
            self.waiting.remove(new)
            self.running.append(new)
            budget -= self._take_chunk(new, budget, items, now)
        return items

    def _may_admit(self) -> bool:
        """Room for one more running request, and for one more prefill (`max_prefills`)."""
        if len(self.running) >= self.config.max_running:
            return False
        cap = self.config.max_prefills
        return not cap or sum(s.in_prefill for s in self.running) < cap

    def released(self) -> None:
        """Pages were given back outside the scheduler (the simulator's cut decode runs)."""
        self._intake.note_release()

    def next_ready(self) -> float | None:
        """When the first running prefill still waiting on its copies can start, or, with a
        queue, the first pin expires."""
        times = [s.ready_at for s in self.running if s.in_prefill]
        expiry = self._retention.next_expiry() if self.waiting else None
        if expiry is not None:
            times.append(expiry)
        return min(times) if times else None

    def break_deadlock(self) -> Sequence | None:
        """Nothing could run: running requests hold every page. Fail the newest one."""
        now = self._clock()
        if not self.has_work() or any(s.ready_at > now for s in self.running):
            return None
        if self._retention.pins:  # pinned pages free up when their TTL expires
            return None
        seq = self.running[-1] if self.running else self.waiting[0]
        seq.finish_reason = "abort"
        seq.error = CapacityError("out of KV pages: every page is held by running requests")
        self.finish(seq, None, aborted=True)
        return seq

    def _take_chunk(self, seq: Sequence, budget: int, items: list[BatchItem], now: float) -> int:
        alone = not items and len(self.running) == 1 and not self.waiting  # `seq` alone
        cap = self.config.solo_chunk if alone else self.config.prefill_chunk
        n = min(budget, cap, len(seq.todo) - seq.cursor)
        if n <= 0 or seq.ready_at > now:
            return 0
        positions = seq.todo[seq.cursor : seq.cursor + n]
        items.append(BatchItem(seq, positions, seq.cursor + n == len(seq.todo)))
        return n

    def _page_for_decode(self, seq: Sequence) -> bool:
        """A page for the decode token, preempting the newest other sequences if need be."""
        while not self.ensure_page(seq, len(seq.tokens) - 1):
            victim = self.running[-1]
            if victim is seq:
                return False
            self.preempt(victim)
        return True

    def preempt(self, seq: Sequence) -> None:
        """Put a running sequence back at the head of the queue, keeping what it computed.

        A decoding sequence inserts its KV into the tree first, so when it is
        admitted again it finds its own pages (or what the policy left of them)
        and recomputes only the rest, exactly as a returning session would.
        """
        self.running.remove(seq)
        if not seq.in_prefill:
            insert_path(seq, self._life, self._hasher, len(seq.tokens) - 1)
        release(seq, self._life, self._write_through and self.agent.park_on_preempt)
        seq.page_table = np.empty(0, np.int32)
        seq.owned = np.empty(0, bool)
        seq.todo = np.empty(0, np.int64)
        seq.cursor = 0
        seq.hashes = self._hasher.hashes(
            seq.token_array(len(seq.tokens)), seq.req.tenant, seq.public_pages
        )
        seq.preemptions += 1
        self._intake.note_release()
        self._sessions.arrive(seq.req.engine_session_id)
        self.waiting.appendleft(seq)

    def ensure_page(self, seq: Sequence, position: int) -> bool:
        if position // self.page_size < len(seq.page_table):
            return True
        try:
            seq.extend_pages(self._cache.allocate(1))
        except CapacityError:
            return False
        return True

    # -- results -----------------------------------------------------------------
    def commit(self, items: list[BatchItem], tokens: list[int | None]) -> list[Sequence]:
        """Apply a step's results; return sequences that got a new token."""
        now = self._clock()
        out = []
        for it, tok in zip(items, tokens):
            seq = it.seq
            if seq.in_prefill:
                seq.cursor += len(it.positions)
                if not seq.in_prefill:
                    insert_path(seq, self._life, self._hasher, len(seq.tokens))
            if tok is None:
                continue
            seq.tokens.append(tok)
            if seq.first_token_at is None:
                seq.first_token_at = now
            seq.finish_reason = seq.stop_for(tok, self.eos, self.max_model_len)
            if seq.finish_reason is not None:
                self.finish(seq, self._turn_stop(seq))
            out.append(seq)
        return out

    def finish(self, seq: Sequence, stop_reason: str | None, aborted: bool = False) -> None:
        """Release a running or waiting sequence (mutates the cache)."""
        now = self._clock()
        if seq in self.waiting:
            self.waiting.remove(seq)
            self._sessions.on_abort(seq.req.engine_session_id)
            self._intake.note_release()  # the head of the queue may have changed
            self._records.finished(seq, self._live_sessions)
            return
        self.running.remove(seq)
        self._intake.note_release()
        if not aborted and not seq.in_prefill:
            insert_path(seq, self._life, self._hasher, len(seq.tokens) - 1)
        release(seq, self._life, self._write_through)
        info = self._sessions.record(seq.req.engine_session_id)
        self._sessions.on_turn_end(seq.req.engine_session_id, stop_reason)
        if not aborted:  # pins (learned and hinted), the harness's hints within its quotas
            gap = self._hinted.turn_ended(seq, stop_reason, self._cost, now)
            self._prefetch.turn_ended(seq.req.engine_session_id, info.turn_end, gap)
        self._records.finished(seq, self._live_sessions)

    def session_hints(self, session_id: str, tenant: str, hints: SessionHints) -> list[HintGrant]:
        """A harness's hints for `session_id` after its turn ended (the session endpoint): applied
        to its record as if that turn had carried them, within the tenant's quotas."""
        grants, gap = self._hinted.between_turns(session_id, tenant, hints, self._cost)
        if gap is not None:
            self._prefetch.turn_ended(session_id, self._sessions.record(session_id).turn_end, gap)
        if hints.end_session or hints.retain_s is not None:
            self._intake.note_release()  # a pin or pages may have gone: the queue may fit now
        return grants

    # -- observability -------------------------------------------------------------
    def footprint(self) -> dict[str, int]:
        """Requests finished so far and retention gaps held (`Inspection.footprint`)."""
        return {
            "requests": self._records.finished_requests,
            "retention_gaps": len(self._retention.own),
        }

    def check(self) -> None:
        """The session records' and the prefetcher's invariants (raises on a breach)."""
        self._records.check()
        self._prefetch.check()

    def discard(self, seq: Sequence) -> None:
        """Take `seq` off the running list without releasing it (a failed step left it
        half-updated, so `finish` raised)."""
        self.running = [s for s in self.running if s is not seq]

    def _live_sessions(self) -> set[str]:
        """Sessions with a request queued or running, or a pin: their records stay."""
        live = {s.req.engine_session_id for s in (*self.waiting, *self.running)}
        return live | self._retention.pins.keys()
