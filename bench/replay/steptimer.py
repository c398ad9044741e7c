"""What each step of the real engine computed, and how long it took.

`StepTimer` builds the engine with a step observer (`BenchHooks.step_observer`)
that keeps the `StepLoad` of each batch the runner is given, in the
simulator's terms; `step()` times the whole `Engine.step` (scheduling,
eviction, copies, the forward, commit) and pairs the two. These pairs are
what `CpuCostModel.fit` fits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.sim.costmodel import StepLoad, step_load
from penelope_engine.core import BenchHooks, CoreHooks
from penelope_engine.engine import Engine
from penelope_engine.sched.sequence import BatchItem
from penelope_engine.sched.sequence import Sequence as EngineSeq


class StepTimer:
    """Builds the engine it times; `step()` runs one engine step and records (load, s)."""

    def __init__(self, make_engine: Callable[[CoreHooks, BenchHooks], Engine]) -> None:
        self.samples: list[tuple[StepLoad, float]] = []
        self._load: StepLoad | None = None
        self.engine = make_engine(CoreHooks(), BenchHooks(step_observer=self.observe))

    def observe(self, items: list[BatchItem]) -> None:
        self._load = step_load(items)

    def step(self) -> list[EngineSeq]:
        """`Engine.step`, timed; a step that ran no batch records nothing."""
        self._load = None
        t0 = time.perf_counter()
        out = self.engine.step()
        seconds = time.perf_counter() - t0
        if self._load is not None:
            self.samples.append((self._load, seconds))
        return out
