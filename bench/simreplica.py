"""One simulated replica: continuous batching with chunked prefill over `ReplicaCache`.

Each step carries one decode token per decoding request, then continues
prefills, then admits waiting requests in arrival order, within the step's
token budget (as `penelope_engine.scheduler` does). A step is planned at its
start (admission mutates the cache then) and committed at its end (inserts,
first tokens, finished turns). When a step would only decode, the replica
runs several decode steps at once, up to the next event anywhere in the
simulation or the first request to finish, which gives the same times as
stepping one by one.

Copies: demoting device pages to the host must finish before the request
may write its freshly allocated pages, and loads from the host or store
must finish before it prefills; both go through one PCIe channel per
direction. Write-through at the end of a turn is charged to the
device-to-host channel and delays nothing else.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from bench.costmodel import CostModel, StepLoad, decode_run
from bench.simcache import Admission, ReplicaCache
from penelope_engine.config import SchedulerConfig
from penelope_engine.errors import CapacityError


@dataclass(eq=False)
class SimRequest:
    session_id: str
    turn: int
    arrival: float
    prompt_len: int
    output_len: int
    hashes: np.ndarray  # page ids of the full pages of prompt + output
    reusable_pages: int  # leading pages equal to the session's previous sequence
    shared_pages: int  # leading pages of the common prefix
    stop_reason: str
    adm: Admission | None = None
    admitted_at: float | None = None
    ready_at: float = 0.0
    cursor: int = 0  # tokens of adm.todo computed
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    replica: int = -1

    @property
    def todo_len(self) -> int:
        return sum(e - s for s, e in self.adm.todo) if self.adm else 0

    @property
    def in_prefill(self) -> bool:
        return self.first_token_at is None


def _chunk_load(todo: list[tuple[int, int]], cursor: int, n: int) -> tuple[int, int]:
    """(attention pairs, keys read) of computing todo tokens [cursor, cursor + n)."""
    pairs = keys = 0
    done = 0
    for s, e in todo:
        lo, hi = max(s, s + cursor - done), min(e, s + cursor + n - done)
        done += e - s
        if hi <= lo:
            continue
        m = hi - lo
        pairs += m * lo + m * (m + 1) // 2
        keys = hi
    return pairs, keys


@dataclass
class Step:
    start: float
    end: float
    chunks: list[tuple[SimRequest, int]] = field(default_factory=list)
    decodes: list[SimRequest] = field(default_factory=list)
    decode_steps: int = 0


class Replica:
    def __init__(
        self, index: int, cache: ReplicaCache, sched: SchedulerConfig, cost: CostModel
    ) -> None:
        self.index = index
        self.cache = cache
        self.sched = sched
        self.cost = cost
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.busy = False
        self.h2d_free = self.d2h_free = 0.0
        self._version = 0  # bumps whenever a turn ends (pages may have become evictable)
        self._blocked_at = -1  # version at which the head of the queue last failed to fit

    @property
    def queue_len(self) -> int:
        return len(self.waiting) + len(self.running)

    def enqueue(self, req: SimRequest, now: float) -> None:
        req.replica = self.index
        self.cache.cache.on_arrival(req.session_id, now)
        self.waiting.append(req)

    def next_ready(self) -> float | None:
        """When a request now waiting on copies can prefill, if none can now."""
        times = [r.ready_at for r in self.running if r.in_prefill]
        return min(times) if times else None

    # -- planning ---------------------------------------------------------------------
    def plan(self, now: float, horizon: float) -> Step | None:
        """The step starting at `now` (admitting mutates the cache), or None if idle."""
        budget = self.sched.max_batch_tokens
        step = Step(now, now)
        step.decodes = [r for r in self.running if not r.in_prefill]
        budget -= len(step.decodes)
        for r in self.running:
            if r.in_prefill and r.ready_at <= now and budget > 0:
                budget -= self._take(step, r, budget)
        while budget > 0 and self.waiting and len(self.running) < self.sched.max_running:
            if not self._admit(self.waiting[0], now):
                break
            r = self.waiting.popleft()
            self.running.append(r)
            if r.ready_at <= now:
                budget -= self._take(step, r, budget)
        if not step.chunks and not step.decodes:
            return None
        ready = [r.ready_at for r in self.running if r.in_prefill and r.ready_at > now]
        step.end = now + self._duration(step, min([horizon, *ready]))
        return step

    def _admit(self, r: SimRequest, now: float) -> bool:
        if self._blocked_at == self._version:
            return False
        ps = self.cache.page_size
        adm = self.cache.admit(
            r.session_id,
            r.hashes[: r.prompt_len // ps],
            r.prompt_len,
            r.output_len,
            r.reusable_pages,
            r.shared_pages,
        )
        if adm is None:
            if not self.running:  # nothing will ever unlock pages: it cannot fit
                raise CapacityError(
                    f"replica {self.index}: {r.session_id} turn {r.turn} "
                    f"({r.prompt_len} + {r.output_len} tokens) does not fit"
                )
            self._blocked_at = self._version
            return False
        r.adm, r.admitted_at, ready = adm, now, now
        if adm.demoted_pages:
            self.d2h_free = max(now, self.d2h_free) + self.cost.offload_time(adm.demoted_pages * ps)
            ready = self.d2h_free
        for tier, tokens in adm.load_tokens.items():
            self.h2d_free = max(ready, self.h2d_free) + self.cost.load_time(tokens, tier)
            ready = max(ready, self.h2d_free)
        r.ready_at = ready
        return True

    def _take(self, step: Step, r: SimRequest, budget: int) -> int:
        n = min(budget, self.sched.prefill_chunk, r.todo_len - r.cursor)
        if n > 0:
            step.chunks.append((r, n))
        return max(n, 0)

    def _load(self, step: Step) -> StepLoad:
        tokens = rows = pairs = keys = 0
        for r, n in step.chunks:
            assert r.adm is not None
            p, k = _chunk_load(r.adm.todo, r.cursor, n)
            tokens, pairs, keys = tokens + n, pairs + p, keys + k
            rows += int(r.cursor + n == r.todo_len)
        live = sum(r.prompt_len + r.generated for r in step.decodes)  # keys, own token included
        b = len(step.decodes)
        return StepLoad(tokens + b, rows + b, pairs + live, keys + live, len(step.chunks) + b)

    def _duration(self, step: Step, horizon: float) -> float:
        if step.chunks:
            step.decode_steps = 1 if step.decodes else 0
            return self.cost.step_time(self._load(step))
        most = min(r.output_len - r.generated for r in step.decodes)
        ends = np.cumsum(decode_run(self.cost, self._load(step), most))
        step.decode_steps = min(most, int(np.searchsorted(ends, horizon - step.start)) + 1)
        return float(ends[step.decode_steps - 1])

    # -- commit -------------------------------------------------------------------------
    def commit(self, step: Step, write_through: bool) -> list[SimRequest]:
        """Apply a finished step at `step.end`; returns the requests whose turn ended."""
        done: list[SimRequest] = []
        ps = self.cache.page_size
        for r in step.decodes:
            r.generated += step.decode_steps
            if r.generated >= r.output_len:
                done.append(r)
        for r, n in step.chunks:
            r.cursor += n
            if r.cursor == r.todo_len:
                assert r.adm is not None
                self.cache.insert(r.session_id, r.adm, r.hashes[: r.prompt_len // ps])
                r.first_token_at, r.generated = step.end, 1
                if r.output_len == 1:
                    done.append(r)
        for r in done:
            self._finish(r, step.end, write_through)
        return done

    def _finish(self, r: SimRequest, now: float, write_through: bool) -> None:
        assert r.adm is not None
        ps = self.cache.page_size
        self.cache.insert(r.session_id, r.adm, r.hashes[: (r.prompt_len + r.output_len - 1) // ps])
        copied = self.cache.release(r.session_id, r.adm, r.stop_reason, write_through)
        if copied:
            self.d2h_free = max(now, self.d2h_free) + self.cost.offload_time(copied * ps)
        r.finished_at = now
        self.running.remove(r)
        self._version += 1
