"""`build_core` is the one assembly point: what a caller injects is what the core uses."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from penelope_engine.cache.eviction import LruPolicy
from penelope_engine.cache.pages import PageHasher
from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.core import BenchHooks, CoreHooks, CoreTiers, build_core
from penelope_engine.engine import Engine
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.sched.sequence import BatchItem
from penelope_engine.tiers.planner import CalibratedCost


class NoTiers:
    """Tiers that move nothing and say every copy is done at once."""

    def begin(self) -> None: ...

    def ready_at(self, now: float) -> float:
        return now

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        return True

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        return 0

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        return np.zeros(len(hashes), dtype=bool)

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        return True

    def spill(self, node: object, idx: np.ndarray) -> bool:
        return True


def test_build_core_wires_the_injected_clock_policy_tiers_and_cost() -> None:
    now = [100.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    policy, tiers, cost = LruPolicy(), NoTiers(), CalibratedCost()
    cache = CacheConfig(page_size=4, device_pages=32, host_pages=8, policy="penelope")
    core = build_core(
        cache,
        SchedulerConfig(),
        tiers,
        PageHasher(4, "t"),
        CoreHooks(clock=clock),
        BenchHooks(cost=cost, policy=policy),
        has_store=False,
        max_model_len=1024,
    )
    assert core.cache.policy is policy  # the object, not the configured name
    assert core.cache._placement.io is tiers and core.scheduler._tiers is tiers
    assert core.tiers is tiers and core.scheduler._sessions is core.sessions
    assert core.scheduler._cache is core.cache and core.scheduler._cost() is cost
    assert core.sessions.now == 100.0 and core.scheduler._clock() == 100.0
    assert core.scheduler._write_through  # host pages and write_through
    assert core.cache.page_cost(3) == cost.recompute_s(12, 4)


def test_write_policy_off_gives_the_core_no_host_tier() -> None:
    cache = CacheConfig(page_size=4, device_pages=32, host_pages=8, write_policy="off")
    core = build_core(
        cache,
        SchedulerConfig(),
        NoTiers(),
        PageHasher(4, "t"),
        calibrated=CalibratedCost,
        has_store=False,
        max_model_len=1024,
    )
    assert core.cache._host.capacity == 0 and not core.scheduler._write_through


def test_bench_hooks_wrap_the_engines_tiers_and_observe_each_batch(tiny_qwen3: LoadedModel) -> None:
    wrapped: list[CoreTiers] = []
    batches: list[list[BatchItem]] = []

    def wrap(real: CoreTiers) -> CoreTiers:
        wrapped.append(real)
        return real

    bench = BenchHooks(wrap_tiers=wrap, step_observer=batches.append)
    engine = Engine(
        EngineConfig(cache=CacheConfig(page_size=4, device_pages=64)), tiny_qwen3, bench=bench
    )
    assert wrapped == [engine._tiers] and engine.inspect().core.tiers is engine._tiers
    engine.add_request(GenerateRequest("r", tuple(range(1, 10)), SamplingParams(max_tokens=2)))
    while engine.has_work():
        engine.step()
    assert len(batches) >= 2 and all(batches)  # one prefill, then decodes
    engine.check_integrity()
