"""What each step of the real engine computed, and how long it took.

`StepTimer` sits between the engine and its model runner (it forwards every
call) and keeps the `StepLoad` of the batch the runner was given, in the
simulator's terms; the caller times the whole `Engine.step` (scheduling,
eviction, copies, the forward, commit) and pairs the two. These pairs are
what `CpuCostModel.fit` fits.
"""

from __future__ import annotations

import time

from bench.sim.costmodel import StepLoad, step_load
from penelope_engine.engine import Engine
from penelope_engine.runner import ModelRunner
from penelope_engine.sequence import BatchItem
from penelope_engine.sequence import Sequence as EngineSeq


class StepTimer:
    """Wraps `engine.runner`; `step()` runs one engine step and records (load, seconds)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.runner: ModelRunner = engine.runner
        engine.runner = self  # type: ignore[assignment]
        self.samples: list[tuple[StepLoad, float]] = []
        self._load: StepLoad | None = None

    def run(self, items: list[BatchItem]) -> list[int | None]:
        self._load = step_load(items)
        return self.runner.run(items)

    def step(self) -> list[EngineSeq]:
        """`Engine.step`, timed; a step that ran no batch records nothing."""
        self._load = None
        t0 = time.perf_counter()
        out = self.engine.step()
        seconds = time.perf_counter() - t0
        if self._load is not None:
            self.samples.append((self._load, seconds))
        return out
