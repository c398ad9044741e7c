"""Loads that stream layer by layer (SGLang HiCache): an earlier prefill, overlapped copies."""

from __future__ import annotations

import numpy as np
import pytest

from bench.experiments.peers import sim_config
from bench.sim.config import SimConfig
from bench.sim.costmodel import StepLoad, step_load
from bench.sim.replica import Replica, SimRequest, Step
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.sim.setups import CACHES, setups
from bench.sim.tiers import NullTiers, TimedTiers
from penelope_engine.cache.tier import Tier

COST = GpuCostModel(QWEN3["qwen3-8b"], HARDWARE["h200"])
PS = 64
HISTORY = 4096  # the first turn's prompt: 64 pages, on the host when the session returns
OUT = 4


class _Clock:
    now = 0.0


def _replica(layerwise: bool, clock: _Clock) -> Replica:
    cfg = SimConfig(
        tiers="gpu+cpu",
        device_budget_tokens=112 * PS,  # one long turn at a time: the next evicts the last
        host_budget_tokens=1000 * PS,
        page_size=PS,
        layerwise_loads=layerwise,
    )
    return Replica.simulated(
        0,
        cfg.cache_config(),
        "lru",
        cfg.scheduler,
        COST,
        lambda: clock.now,
        layerwise_loads=cfg.layerwise_loads,
    )


def _request(rep: Replica, sid: str, turn: int, tokens: np.ndarray, now: float) -> SimRequest:
    prompt = len(tokens) - OUT
    hashes = rep.hasher.hashes(tokens[:prompt])[: prompt // PS]
    return SimRequest(sid, turn, now, prompt, OUT, tokens, hashes, 0, 0, "tool_use")


def _serve(rep: Replica, clock: _Clock, req: SimRequest) -> list[Step]:
    """Run `req` alone to its end; the steps it took."""
    rep.enqueue(req, clock.now)
    steps = []
    while rep.scheduler.has_work():
        step = rep.plan(clock.now)
        if step is None:  # waiting on copies
            ready = rep.next_ready()
            assert ready is not None and ready > clock.now
            clock.now = ready
            continue
        steps.append(step)
        clock.now = step.end
        rep.commit(step)
    return steps


def _returning_turn(layerwise: bool, new: int) -> tuple[SimRequest, list[Step], float]:
    """A session's second turn, its whole history on the host: the request, its steps and
    when it was admitted."""
    clock = _Clock()
    rep = _replica(layerwise, clock)
    rng = np.random.default_rng(0)
    first = rng.integers(0, 150_000, HISTORY + OUT, dtype=np.int32)
    _serve(rep, clock, _request(rep, "a", 0, first, clock.now))
    other = rng.integers(0, 150_000, 112 * PS - OUT, dtype=np.int32)  # all the device
    _serve(rep, clock, _request(rep, "b", 0, other, clock.now))
    clock.now += 1.0
    second = np.concatenate([first, rng.integers(0, 150_000, new + OUT, dtype=np.int32)])
    req = _request(rep, "a", 1, second, clock.now)
    admitted = clock.now
    return req, _serve(rep, clock, req), admitted


@pytest.mark.parametrize("new", [32, 3000])  # copy longer than the compute, then shorter
def test_layerwise_loads_start_the_prefill_earlier_and_overlap_the_copy(new: int) -> None:
    whole, whole_steps, t0 = _returning_turn(False, new)
    layered, layered_steps, t1 = _returning_turn(True, new)
    assert t0 == t1
    for r in (whole, layered):  # the whole history loaded from the host, nothing recomputed
        assert (r.usage.host_tokens, r.usage.device_tokens) == (HISTORY, 0)
        assert r.usage.recomputed_tokens == 0
    copy = COST.load_time(HISTORY, Tier.HOST)
    layers = QWEN3["qwen3-8b"].num_layers
    # the first turn's output and the new tokens, in one chunk, over the loaded history
    prefill = COST.step_time(StepLoad.of([(OUT + new, HISTORY)], []))
    assert len(whole_steps[0].items) == 1 and len(whole_steps[0].items[0].positions) == OUT + new
    assert step_load(whole_steps[0].items) == step_load(layered_steps[0].items)

    # without: the prefill waits for the whole copy, then computes
    assert whole_steps[0].start == pytest.approx(t0 + copy)
    assert whole.first_token_at == pytest.approx(t0 + copy + prefill)
    # with: its forward starts at once, layer 0 waiting a layers-th of the copy ...
    assert layered_steps[0].start == pytest.approx(t0)
    assert whole_steps[0].start - layered_steps[0].start == pytest.approx(copy)
    # ... and its step lasts until the last layer's copy is in and that layer has run
    end = max(t0 + copy / layers + prefill, t0 + copy + prefill / layers)
    assert layered.first_token_at == pytest.approx(end)
    if copy > prefill:  # the copy bounds the step: longer than its compute alone
        assert end - layered_steps[0].start > prefill
    assert layered.first_token_at < whole.first_token_at
    # the later steps (decodes) are untouched
    rest = [s.end - s.start for s in whole_steps[1:]]
    assert [s.end - s.start for s in layered_steps[1:]] == pytest.approx(rest)


def test_streamed_loads_stall_no_thread_and_whole_ones_stall_the_step() -> None:
    clock = _Clock()
    layered = TimedTiers(NullTiers(), COST, PS, lambda: clock.now, layers=4)
    whole = TimedTiers(NullTiers(), COST, PS, lambda: clock.now)
    pages = np.arange(10)
    a = COST.load_time(10 * PS, Tier.HOST)
    for tiers in (layered, whole):
        tiers.begin()
        tiers.host_to_device(pages, pages)
        assert tiers.ready_at(0.0) == 0.0  # done before the step's forward, not later
    assert layered.step_start(0.0) == 0.0 and layered.take_streamed() == pytest.approx(a)
    assert layered.take_streamed() == 0.0  # each step streams its own loads
    assert whole.step_start(0.0) == pytest.approx(a) and whole.take_streamed() == 0.0
    whole.host_to_device(pages[:4], pages[:4])  # the next copy queues behind it on the thread
    b = COST.load_time(4 * PS, Tier.HOST)
    assert whole.step_start(0.0) == pytest.approx(a + b)
    assert whole.stats.step_copy_s == pytest.approx(a + b) and whole.stats.h2d_pages == 14
    assert whole.step_start(10.0) == 10.0  # copies long done


def test_only_sglang_hicache_streams_its_loads() -> None:
    assert [c for c, s in CACHES.items() if s.layerwise_loads] == ["sglang-hicache"]
    for s in setups(with_ablations=True):
        cfg = sim_config(s, 100_000, 2.0, 1)
        assert cfg.layerwise_loads == s.spec.layerwise_loads
        assert cfg.layerwise_loads == (s.cache == "sglang-hicache")
    with pytest.raises(ValueError, match="layers"):
        TimedTiers(NullTiers(), COST, PS, lambda: 0.0, layers=0)
