"""Agent sessions through the real engine, in wall-clock time.

The loop keeps a heap of due turns. Session i's first turn is due at its
workload start; turn k+1 is due `think_time_s` (already scaled by the trace's
time factor) after turn k's last token, as in `bench.sim`. Each pass submits
every due turn to the engine, then runs one engine step (or sleeps until the
next turn is due when the engine is idle). A turn that becomes due during a
step waits for that step to end, as a request reaching a busy server does, and
its TTFT is counted from when it was due.

Turn k's prompt is the trace's tokens (`bench.tokens`), its output length the
trace's (capped by the caller), decoded greedily with EOS ignored. When turn
k+1 extends turn k (it starts with turn k's prompt), the positions of turn k's
output carry the tokens the model generated, as an agent repeats the answer it
got; the cache then finds them, as the simulator's does. The stop
reason of the trace is the request's `stop_reason_hint`. After a turn ends the
cache is told when the session's next turn will be due (only the `oracle`
policy reads it). Subagents are not replayed (`clip_workload` keeps them;
this loop ignores them).

The cache reads the time through a clock this loop sets before each pass
(`time.monotonic()` then), so the time stands still within an engine step,
as it does within an event of the simulator: the time-dependent policies
(`return_aware`, `oracle`) then rank victims as the simulator does.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.replay.steptimer import StepTimer
from bench.sessions import Session
from bench.sim.metrics import RequestRecord, RunMetrics, SessionRecord, history_class, summarize
from bench.sim.oracle import tell_next_arrival
from bench.tokens import TokenMap, repeat_answer
from bench.workload import Workload
from penelope_engine.core import BenchHooks, CoreHooks
from penelope_engine.engine import Engine
from penelope_engine.errors import PenelopeError
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.sched.sequence import Sequence as EngineSeq


@dataclass(eq=False)
class _Pending:
    session_id: str
    turn: int
    due: float
    seq: EngineSeq
    admitted_at: float | None = None


class EngineReplay:
    """One replay of a workload on one engine (fresh cache); `run()` returns its metrics."""

    def __init__(
        self,
        make_engine: Callable[[CoreHooks, BenchHooks], Engine],
        workload: Workload,
        tokens: TokenMap,
    ) -> None:
        self.timer = StepTimer(make_engine)  # the engine's core on the real clock
        self.engine = engine = self.timer.engine
        self.workload = workload
        self.tokens = tokens
        self.sessions = {s.id: s for s in workload.sessions}
        self.page_size = engine.config.cache.page_size
        self._heap: list[tuple[float, int, str, int]] = []
        self._order = itertools.count()
        self._pending: dict[str, _Pending] = {}
        self._starts: dict[str, float] = {}
        # each session's last turn: its trace tokens, and the tokens it really ran
        self._last: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.requests: list[RequestRecord] = []
        self.session_records: list[SessionRecord] = []
        self.failed = 0
        self.preemptions = 0  # times the engine put a running request back in the queue
        self.step_s = 0.0  # inside Engine.step
        self.idle_s = 0.0  # asleep, waiting for the next turn
        self.busy_s = 0.0  # the whole loop minus the sleeps
        self.t0 = 0.0
        self._clock = time.monotonic()

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def run(self) -> RunMetrics:
        wall = time.perf_counter()
        self.t0 = time.monotonic()
        for s, start in zip(self.workload.sessions, self.workload.starts):
            self._push(start, s.id, 0)
        while self._heap or self._pending:
            self._clock = time.monotonic()
            now = self._clock - self.t0
            while self._heap and self._heap[0][0] <= now:
                due, _, sid, k = heapq.heappop(self._heap)
                self._submit(due, sid, k)
            if self.engine.has_work():
                self._step()
            elif self._heap:
                t = time.perf_counter()
                time.sleep(max(0.0, min(self._heap[0][0] - self._now(), 0.05)))
                self.idle_s += time.perf_counter() - t
            elif self._pending:
                raise RuntimeError(f"engine idle with {len(self._pending)} requests unfinished")
        wall = time.perf_counter() - wall
        self.busy_s = wall - self.idle_s
        return summarize(self.requests, self.session_records, self.failed, self._now(), wall)

    @property
    def outside_steps_s(self) -> float:
        """Busy time not inside an engine step: submitting turns, tracking admissions.
        The simulator charges none of it."""
        return self.busy_s - self.step_s

    def _push(self, due: float, sid: str, k: int) -> None:
        heapq.heappush(self._heap, (due, next(self._order), sid, k))

    def _submit(self, due: float, sid: str, k: int) -> None:
        s, turn = self.sessions[sid], self.sessions[sid].turns[k]
        self._starts.setdefault(sid, due)
        req = GenerateRequest(
            f"{sid}:{k}",
            self._prompt(sid, s, k),
            SamplingParams(max_tokens=turn.output_tokens, ignore_eos=True),
            session_id=sid,
            stop_reason_hint=turn.stop_reason or None,
        )
        try:
            seq = self.engine.add_request(req)
        except PenelopeError:  # larger than the whole device pool: counted, skipped
            self.failed += 1
            self._turn_over(sid, k, due)
            return
        self._pending[req.request_id] = _Pending(sid, k, due, seq)

    def _prompt(self, sid: str, s: Session, k: int) -> tuple[int, ...]:
        """The trace's input for turn k, with the previous turn's answer as generated."""
        ids = repeat_answer(self.tokens.input_ids(s, k), self._last.get(sid))
        return tuple(ids.tolist())

    def _step(self) -> None:
        started = self._now()
        out = self.timer.step()
        ended = self._now()
        self.step_s += ended - started
        waiting = set(map(id, self.engine.inspect().core.scheduler.waiting))
        for p in self._pending.values():
            if p.admitted_at is None and id(p.seq) not in waiting:
                p.admitted_at = started
        for seq in out:
            if seq.finish_reason is not None:
                self._finish(self._pending.pop(seq.request_id), ended)

    def _finish(self, p: _Pending, ended: float) -> None:
        seq, turn = p.seq, self.sessions[p.session_id].turns[p.turn]
        self.preemptions += seq.preemptions
        if seq.error is not None or seq.first_token_at is None:
            self.failed += 1
        else:
            raw = self.tokens.sequence_ids(self.sessions[p.session_id], p.turn)
            self._last[p.session_id] = (raw, seq.token_array(len(seq.tokens)))
            u = seq.usage
            self.requests.append(
                RequestRecord(
                    p.session_id,
                    p.turn,
                    0,
                    p.due,
                    p.admitted_at if p.admitted_at is not None else p.due,
                    seq.first_token_at - self.t0,
                    ended,
                    seq.prompt_len,
                    u.device_tokens,
                    u.host_tokens,
                    u.store_tokens,
                    u.recomputed_tokens,
                    u.new_tokens,
                    history_class(u, p.turn, turn.shared_prefix_tokens, self.page_size),
                    misses=u.misses,
                )
            )
        self._turn_over(p.session_id, p.turn, ended)

    def _turn_over(self, sid: str, k: int, now: float) -> None:
        s, core = self.sessions[sid], self.engine.inspect().core
        if k + 1 < len(s.turns):
            due = now + s.turns[k + 1].think_time_s
            tell_next_arrival(core.cache, core.sessions, sid, self.t0 + due)
            self._push(due, sid, k + 1)
            return
        tell_next_arrival(core.cache, core.sessions, sid, math.inf)
        self.session_records.append(SessionRecord(sid, self._starts[sid], now, s.tool_time_s))
