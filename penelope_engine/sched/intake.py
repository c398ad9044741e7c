"""The waiting side of the scheduler: the queue, and which waiting request is admitted next.

`Intake` keys each arriving request into the queue (the agent order of
`agent.queue_key`, plus a size term), and admits in queue order, except that
requests that have waited `starvation_s` go first, oldest first: without
backfill only the head may go; with it, later requests may pass a head that does
not fit until the head has waited `starvation_s`. A head that does not fit first
takes back the pins that yield (`Retention.yield_one`), one at a time.

A request that failed to fit is not tried again until pages may have become free
or evictable: every such event bumps `releases` (`note_release`), and a request
remembers the count it failed at (`Sequence.blocked_at`). Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from penelope_engine.cache.request_life import RequestLife
from penelope_engine.config import AgentConfig
from penelope_engine.protocol import TokenUsage
from penelope_engine.sched.admission import admit
from penelope_engine.sched.agent import Retention, WaitingQueue, prefill_estimate_s, queue_key
from penelope_engine.sched.hinted import HintedSessions
from penelope_engine.sched.sequence import Sequence
from penelope_engine.tiers.contract import SchedulerTiers
from penelope_engine.tiers.planner import PlannerCost


class Intake:
    """Waiting requests in queue order, their admission, and the usage of first admissions."""

    def __init__(
        self,
        agent: AgentConfig,
        life: RequestLife,
        tiers: SchedulerTiers,
        cost: Callable[[], PlannerCost],
        retention: Retention,
        hinted: HintedSessions,
    ) -> None:
        self.agent = agent
        self.life = life
        self.cache, self.sessions = life.cache, life.sessions
        self.tiers = tiers
        self.cost = cost
        self.retention = retention
        self.hinted = hinted
        self.waiting = WaitingQueue()
        self.totals = TokenUsage()
        self.releases = 0  # bumps whenever pages may have become free or evictable

    def note_release(self) -> None:
        """Pages may have become free or evictable: blocked requests may try again."""
        self.releases += 1

    def add(self, seq: Sequence) -> None:
        sid = seq.req.engine_session_id
        last = self.sessions.get(sid)  # None: its first request (or its record expired)
        ended = last.turn_end if last is not None else None
        gap = None if ended is None else max(0.0, seq.arrival - ended)
        tool = last is not None and last.last_stop == "tool_use"
        if self.retention.on_arrival(sid, gap, tool):
            self.note_release()
        info = self.sessions.arrive(sid, seq.arrival)
        self.hinted.arrived(seq)
        start = info.first_arrival if info.first_arrival is not None else seq.arrival
        sized = self.agent.admission == "shortest" or self.agent.size_weight
        est = prefill_estimate_s(seq, self.cache, self.cost()) if sized else 0.0
        self.waiting.insert(seq, queue_key(self.agent, seq.arrival, start, est))

    def next_admitted(self, now: float) -> Sequence | None:
        """Admit the first waiting request that fits, in queue order (the module's rules)."""
        for i, seq in enumerate(self._order(now)):
            while not self._admit(seq, now):
                if i or not self.retention.yield_one():
                    break
                self.note_release()
            else:
                return seq
            if not self.agent.backfill or now - seq.arrival >= self.agent.starvation_s:
                return None
        return None

    def _order(self, now: float) -> Iterable[Sequence]:
        """The queue order, but requests that have waited `starvation_s` first, oldest first:
        nobody passes them (neither by the order's key nor by backfill). The queue is not
        changed while the caller walks it."""
        starved = [s for s in self.waiting if now - s.arrival >= self.agent.starvation_s]
        if not starved:
            return self.waiting
        starved.sort(key=lambda s: s.arrival)
        return starved + [s for s in self.waiting if now - s.arrival < self.agent.starvation_s]

    def _admit(self, seq: Sequence, now: float) -> bool:
        if seq.blocked_at == self.releases:  # nothing was freed since it last failed
            return False
        usage = admit(seq, self.life, self.tiers, self.cost(), now)
        if usage is None:
            seq.blocked_at = self.releases
            return False
        if not seq.preemptions:  # usage describes the request's first admission
            seq.usage = usage
            self.totals += usage
            self.retention.on_admit(now - seq.arrival)
        return True
