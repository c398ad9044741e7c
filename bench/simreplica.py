"""One simulated replica: the engine's own scheduling core, on a cost model's clock.

The replica holds the engine's `Scheduler` over the real `PrefixCache`,
policies and planner, with `TimedTiers` for copies. Only three things are
simulated: the duration of each step (`CostModel.step_time` of the batch the
scheduler chose, measured as `bench.steptimer.step_load` measures the
engine's), the tokens (the trace's, scripted, instead of a model's), and the
time copies take. Admission, load-or-recompute, chunking, decode pages,
preemption, usage accounting, insert and release are the engine's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bench.costmodel import CostModel, decode_run, page_cost_fn
from bench.simtiers import NullTiers, TimedTiers, planner_costs
from bench.steptimer import step_load
from penelope_engine.cache import PrefixCache
from penelope_engine.config import SchedulerConfig
from penelope_engine.pages import PageHasher
from penelope_engine.protocol import GenerateRequest, SamplingParams, TokenUsage
from penelope_engine.scheduler import Scheduler
from penelope_engine.sequence import BatchItem, Sequence

TIERS = ("gpu", "gpu+cpu", "gpu+cpu+store")
MAX_MODEL_LEN = 1 << 40  # the trace decides lengths; the workload already capped them


@dataclass(frozen=True)
class CacheSetup:
    policy: str
    page_size: int
    device_pages: int
    host_pages: int = 0
    store: bool = False  # host evictions spill to a store (no byte budget)
    namespace: str = "sim"

    def __post_init__(self) -> None:
        if self.page_size < 1 or self.device_pages < 1 or self.host_pages < 0:
            raise ValueError(f"invalid cache setup {self}")
        if self.store and not self.host_pages:
            raise ValueError("a store sits under the host tier: it needs host_pages")


@dataclass(eq=False)
class SimRequest:
    session_id: str
    turn: int
    arrival: float
    prompt_len: int
    output_len: int
    tokens: np.ndarray  # the turn's prompt, then its scripted output
    hashes: np.ndarray  # page ids of the prompt's full pages (tenant "default")
    reusable_pages: int  # leading pages equal to the session's previous sequence
    shared_pages: int  # leading pages of the common prefix
    stop_reason: str
    seq: Sequence | None = None
    finished_at: float | None = None
    replica: int = -1

    @property
    def request_id(self) -> str:
        return f"{self.session_id}:{self.turn}"

    @property
    def admitted_at(self) -> float | None:
        return self.seq.admitted_at if self.seq is not None else None

    @property
    def first_token_at(self) -> float | None:
        return self.seq.first_token_at if self.seq is not None else None

    @property
    def usage(self) -> TokenUsage:
        return self.seq.usage if self.seq is not None else TokenUsage()


@dataclass
class Step:
    start: float
    end: float
    items: list[BatchItem] = field(default_factory=list)
    decode_steps: int = 1  # > 1: that many decode-only steps run as one event


class Replica:
    def __init__(
        self,
        index: int,
        setup: CacheSetup,
        sched: SchedulerConfig,
        cost: CostModel,
        clock,
        write_through: bool = True,
        fast_decode: bool = True,
    ) -> None:
        self.index, self.setup, self.cost = index, setup, cost
        self.fast_decode = fast_decode
        ps = setup.page_size
        self.page_size = ps
        self.tiers = TimedTiers(NullTiers(), cost, ps, clock)
        self.cache = PrefixCache(
            ps,
            setup.device_pages,
            setup.host_pages,
            setup.policy,
            io=self.tiers,
            has_store=setup.store,
            time_fn=clock,
            page_cost=page_cost_fn(cost, ps),
        )
        plan = planner_costs(cost)
        self.scheduler = Scheduler(
            sched,
            self.cache,
            PageHasher(ps, setup.namespace),
            self.tiers,
            lambda: plan,
            (),
            MAX_MODEL_LEN,
            write_through=write_through and setup.host_pages > 0,
            clock=clock,
        )
        self.requests: dict[str, SimRequest] = {}
        self.busy = False

    @property
    def queue_len(self) -> int:
        return len(self.scheduler.waiting) + len(self.scheduler.running)

    def fits(self, prompt_len: int, output_len: int) -> bool:
        """Whether the whole turn fits the device pool (else it could never run)."""
        return -(-(prompt_len + output_len) // self.page_size) <= self.setup.device_pages

    def enqueue(self, req: SimRequest, now: float) -> None:
        req.replica = self.index
        prompt = req.tokens[: req.prompt_len].tolist()
        greq = GenerateRequest(
            req.request_id,
            tuple(prompt),
            SamplingParams(max_tokens=req.output_len, ignore_eos=True),
            session_id=req.session_id,
            stop_reason_hint=req.stop_reason or None,
        )
        req.seq = Sequence(greq, req.hashes, prompt, arrival=now)
        self.requests[req.request_id] = req
        self.scheduler.add(req.seq)

    # -- steps ---------------------------------------------------------------------------
    def plan(self, now: float, horizon: float = math.inf) -> Step | None:
        """The step starting now (admission mutates the cache then), or None if none runs.

        When it only decodes, and decodes every running request, it runs as many
        decode steps as fit before `horizon` (the next event anywhere) or the
        first request's last token: the same times as stepping one by one.
        """
        sched = self.scheduler
        items = sched.schedule()
        if not items:
            return None
        load = step_load(items)
        if self.fast_decode and len(items) == len(sched.running) and not any(
            it.seq.in_prefill for it in items
        ):
            most = min(it.seq.req.sampling.max_tokens - it.seq.num_generated for it in items)
            ends = np.cumsum(decode_run(self.cost, load, most))
            want = min(most, int(np.searchsorted(ends, horizon - now)) + 1)
            steps = sched.extend_decodes(items, want)
            return Step(now, now + float(ends[steps - 1]), items, steps)
        return Step(now, now + self.cost.step_time(load), items)

    def commit(self, step: Step) -> list[SimRequest]:
        """Apply a finished step at `step.end`; returns the requests whose turn ended."""
        done = []
        for j in range(step.decode_steps):
            tokens: list[int | None] = []
            for it in step.items:
                req = self.requests[it.seq.request_id]
                tokens.append(int(req.tokens[len(it.seq.tokens)]) if it.wants_token else None)
            for seq in self.scheduler.commit(step.items, tokens):
                if seq.finish_reason is not None:
                    assert j == step.decode_steps - 1, "a request finished inside a decode run"
                    done.append(self._finished(seq, step.end))
        return done

    def next_ready(self) -> float | None:
        return self.scheduler.next_ready()

    def fail_stuck(self, now: float) -> SimRequest | None:
        """Nothing can run and nothing is coming: fail the newest request, as the engine does."""
        seq = self.scheduler.break_deadlock()
        return self._finished(seq, now) if seq is not None else None

    def _finished(self, seq: Sequence, now: float) -> SimRequest:
        req = self.requests.pop(seq.request_id)
        req.finished_at = now
        return req
