"""One simulated replica: the engine's own scheduling core, on a cost model's clock.

The replica holds the engine's `Scheduler` over the real `PrefixCache`,
policies and planner, with `TimedTiers` for copies. Only three things are
simulated: the duration of each step (`CostModel.step_time` of the batch the
scheduler chose, measured as `bench.replay.steptimer.step_load` measures the
engine's), the tokens (the trace's, scripted, instead of a model's), and the
time copies take. Admission, load-or-recompute, chunking, decode pages,
preemption, usage accounting, insert and release are the engine's code.

Copies are charged as the engine makes them (`bench.sim.tiers.TimedTiers`):
each copy on the step thread delays the forward of the next step, for every
request in it. Where the tiers load layer by layer (`layerwise_loads`), a
step's loads stream under its forward instead: the forward of layer i waits
for layer i's copy, so the step ends when its compute does after the first
layer is in, or when the last layer is in and that layer's share of the
compute has run after it, whichever is later.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bench.peers.base import CachedRun
from bench.sim.costmodel import CostModel, StepLoad, decode_run, num_layers, step_load
from bench.sim.fastpath import commit_decoded, extend_decodes
from bench.sim.oracle import make_sim_policy
from bench.sim.tiers import NullTiers, TimedTiers
from bench.sim.turns import SimRequest
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.tier import Tier
from penelope_engine.config import CacheConfig, SchedulerConfig
from penelope_engine.core import BenchHooks, Core, CoreHooks, build_core
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.util import cdiv

if TYPE_CHECKING:
    from penelope_engine.engine import Engine

TIERS = ("gpu", "gpu+cpu", "gpu+cpu+store")
SIM_NAMESPACE = "sim"  # one page-hash namespace for the whole simulated fleet
MAX_MODEL_LEN = 1 << 40  # the trace decides lengths; the workload already capped them


@dataclass
class Step:
    start: float
    end: float
    items: list[BatchItem] = field(default_factory=list)
    decode_steps: int = 1  # > 1: that many decode-only steps run as one event
    tokens: list[int | None] | None = None  # from the model; None: the trace's
    ends: np.ndarray | None = None  # a decode run: each step's end, from `start`
    stale: bool = False  # cut short by `Replica.truncate`: its event is ignored


Runner = Callable[[list[BatchItem]], list[int | None]]


class Replica:
    """A scheduler, its cache and tiers, and where tokens come from.

    `Replica.simulated` builds them without a model: tokens are the trace's.
    `Replica.over_engine` takes a real `Engine` and puts it on the simulated
    clock: its scheduler, cache, tiers and model runner run as they do when
    serving, only the time is the cost model's (`bench agree`).
    """

    def __init__(
        self,
        index: int,
        core: Core,
        cost: CostModel,
        runner: Runner | None = None,
        fast_decode: bool = True,
        engine: Engine | None = None,
    ) -> None:
        if not isinstance(core.tiers, TimedTiers):
            raise TypeError("the core's tiers are not timed (Replica.engine_hooks)")
        self.index, self.scheduler, self.tiers, self.cost = index, core.scheduler, core.tiers, cost
        self.cache, self.sessions, self.hasher = core.cache, core.sessions, core.hasher
        self.page_size = self.cache.page_size
        self.runner = runner  # None: the trace's tokens
        self.engine = engine  # the real engine whose core this is (`over_engine`), or None
        self.fast_decode = fast_decode and runner is None
        self.requests: dict[str, SimRequest] = {}
        self.busy = False
        self.current: Step | None = None  # the step running now

    @classmethod
    def simulated(
        cls,
        index: int,
        cache: CacheConfig,
        policy: str,
        sched: SchedulerConfig,
        cost: CostModel,
        clock: Callable[[], float],
        *,
        has_store: bool = False,
        layerwise_loads: bool = False,
        async_writes: bool = False,
        async_spills: bool = False,
        fast_decode: bool = True,
    ) -> Replica:
        """A replica without a model: the core from `build_core` over `NullTiers`, timed.

        `policy` names an eviction policy the simulator runs (the oracle included);
        `has_store`: host evictions spill to a store without a byte budget;
        `layerwise_loads`: loads stream layer by layer over the cost model's layers;
        `async_writes`: device-to-host copies on a stream of their own (HiCache);
        `async_spills`: writes to the store on a thread of their own (the peers')."""
        ps = cache.page_size
        layers = num_layers(cost) if layerwise_loads else 1
        tiers = TimedTiers(NullTiers(), cost, ps, clock, layers, async_writes, async_spills)
        bench = BenchHooks(cost=cost, policy=make_sim_policy(policy))
        core = build_core(
            cache,
            sched,
            tiers,
            PageHasher(ps, SIM_NAMESPACE),
            CoreHooks(clock=clock),
            bench,
            has_store=has_store,
            max_model_len=MAX_MODEL_LEN,
        )
        return cls(index, core, cost, None, fast_decode)

    @staticmethod
    def engine_hooks(
        cost: CostModel, clock: Callable[[], float], page_size: int
    ) -> tuple[CoreHooks, BenchHooks]:
        """What a real engine's core needs to run on the simulated clock: the clock, its copies
        charged to `TimedTiers` (the bytes still move through its tiers) and both the
        planner and the policies' page cost asking `cost` itself, exactly as in
        `Replica.simulated`."""
        timed = BenchHooks(
            wrap_tiers=lambda real: TimedTiers(real, cost, page_size, clock), cost=cost
        )
        return CoreHooks(clock=clock), timed

    @classmethod
    def over_engine(cls, index: int, engine: Engine, cost: CostModel) -> Replica:
        """A replica over an engine built with `engine_hooks`: its own scheduler, cache,
        tiers and model runner, as when serving; only the time is the cost model's."""
        seen = engine.inspect()
        return cls(index, seen.core, cost, seen.run_batch, False, engine)

    @property
    def kv_usage(self) -> float:
        """Device pages running requests hold, as a share of the pool: an engine's reported
        KV usage (vLLM's kv_cache_usage counts cached pages no request uses as free)."""
        return self.scheduler.request_pages() / self.cache.capacity(Tier.DEVICE)

    def waiting_tokens(self) -> int:
        return sum(len(seq.tokens) for seq in self.scheduler.waiting)

    def cached_run(self, hashes: SequenceOf[int]) -> CachedRun:
        """The leading pages of `hashes` this replica holds, by tier, up to the first miss
        or hole: what a KV-event router knows of it (exact and current here)."""
        where = self.cache.match(np.asarray(hashes, dtype=np.uint64)).where
        holes = np.flatnonzero(where == Tier.HOLE)
        run = where[: int(holes[0])] if len(holes) else where
        return CachedRun(
            int(np.count_nonzero(run == Tier.DEVICE)),
            int(np.count_nonzero(run == Tier.HOST)),
            int(np.count_nonzero(run == Tier.STORE)),
        )

    @property
    def queue_len(self) -> int:
        return len(self.scheduler.waiting) + len(self.scheduler.running)

    def fits(self, prompt_len: int, output_len: int) -> bool:
        """Whether the whole turn fits the device pool (else it could never run)."""
        return cdiv(prompt_len + output_len, self.page_size) <= self.cache.capacity(Tier.DEVICE)

    def enqueue(self, req: SimRequest, now: float) -> None:
        req.replica = self.index
        req.seq = req.sequence(now)
        self.requests[req.request_id] = req
        self.scheduler.add(req.seq)

    # -- steps ---------------------------------------------------------------------------
    def plan(self, now: float, horizon: float = math.inf) -> Step | None:
        """The step starting now (admission mutates the cache then), or None if none runs.

        When it only decodes, and decodes every running request, it runs as many
        decode steps as fit before `horizon` (the next arrival anywhere) or the
        first request's last token: the same times as stepping one by one. An
        arrival routed here during the run cuts it short (`truncate`).
        """
        sched = self.scheduler
        items = sched.schedule()
        if not items:
            return None
        load = step_load(items)
        if self.runner is not None:  # the model runs the step now; its tokens land at the end
            start, end = self._span(now, load)
            return Step(start, end, items, tokens=self.runner(items))
        if (
            self.fast_decode
            and len(items) == len(sched.running)
            and not any(it.seq.in_prefill for it in items)
        ):
            most = min(it.seq.req.sampling.max_tokens - it.seq.num_generated for it in items)
            ends = np.cumsum(decode_run(self.cost, load, most))
            want = min(most, int(np.searchsorted(ends, horizon - now)) + 1)
            steps = extend_decodes(sched, items, want)
            start = self.tiers.step_start(now)  # after the copies its decode pages made
            self.tiers.take_streamed()  # a decode step loads nothing
            return Step(start, start + float(ends[steps - 1]), items, steps, ends=ends[:steps])
        start, end = self._span(now, load)
        return Step(start, end, items)

    def _span(self, now: float, load: StepLoad) -> tuple[float, float]:
        """When a step planned at `now` starts its forward and when it ends.

        It starts once the step thread's copies are done (`TimedTiers.step_start`:
        demotions, write-through, loads, spills, installs, whichever request they
        were for). Loads streamed layer by layer (`layers` > 1) run under the
        forward: the forward of layer i waits for layer i's copy, a `layers`-th of
        the loads each, so the step ends after the first layer's copy and the
        whole compute, or after every copy and the last layer's compute."""
        compute = self.cost.step_time(load)
        start = self.tiers.step_start(now)
        loads, n = self.tiers.take_streamed(), self.tiers.layers
        if loads <= 0:
            return start, start + compute
        return start, start + max(compute + loads / n, loads + compute / n)

    def truncate(self, now: float) -> Step | None:
        """A request arrived here at `now` during a decode run: end the run with the step
        running at `now`, as stepping one by one would, and return the shorter step.

        Pages granted for the steps cut off are given back, so the pool holds
        what it would after those steps; None when the run ends by then anyway.
        """
        step = self.current
        if step is None or step.ends is None or step.stale:
            return None
        # the step running at `now` (one ending exactly then is followed by one more, which
        # started before this arrival was seen)
        k = int(np.searchsorted(step.ends, now - step.start, side="right")) + 1
        if k >= step.decode_steps:
            return None
        for it in step.items:
            seq = it.seq
            keep = (len(seq.tokens) + k - 2) // self.page_size + 1
            if keep < len(seq.page_table):
                assert seq.owned[keep:].all(), "decode pages are the request's own"
                self.cache.free(seq.page_table[keep:])
                seq.page_table, seq.owned = seq.page_table[:keep], seq.owned[:keep]
        self.scheduler.released()
        step.stale = True
        self.current = Step(
            step.start, step.start + float(step.ends[k - 1]), step.items, k, ends=step.ends[:k]
        )
        return self.current

    def commit(self, step: Step) -> list[SimRequest]:
        """Apply a finished step at `step.end`; returns the requests whose turn ended."""
        done = []
        if step.decode_steps > 1:  # a decode run: every token but the last step's at once
            k = step.decode_steps - 1
            runs = []
            for it in step.items:
                n = len(it.seq.tokens)
                runs.append(self.requests[it.seq.request_id].tokens[n : n + k])
            commit_decoded(self.scheduler, step.items, runs)
        tokens = step.tokens if step.tokens is not None else self._scripted(step.items)
        for seq in self.scheduler.commit(step.items, tokens):
            if seq.finish_reason is not None:
                done.append(self._finished(seq, step.end))
        return done

    def _scripted(self, items: list[BatchItem]) -> list[int | None]:
        out: list[int | None] = []
        for it in items:
            req = self.requests[it.seq.request_id]
            out.append(int(req.tokens[len(it.seq.tokens)]) if it.wants_token else None)
        return out

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
