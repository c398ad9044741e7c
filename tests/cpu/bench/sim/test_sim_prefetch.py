"""Prefetch in the simulator: hinted sessions' store pages are read into the host on the
store's channel before they return, so their turns load less from the store."""

from __future__ import annotations

import dataclasses

import numpy as np
from sim_testkit import growing_workload

from bench.experiments.peers import sim_config
from bench.sim.costmodel import CpuCostModel
from bench.sim.loop import Simulator
from bench.sim.metrics import RunMetrics
from bench.sim.setups import hinted, setups
from bench.sim.tiers import Found, NullTiers, TimedTiers
from penelope_engine.cache.tier import Tier

# A store read is on the turn's critical path but cheaper than recomputing (0.26 ms a
# token against 1 ms); a device and a host of 1,500 tokens each: eight growing
# sessions spill to the store.
SLOW = CpuCostModel(2e-3, 1e-3, 0.05e-6, 1e-4, kv_bytes_per_token=1 << 18, copy_bytes_per_s=1e9)
BUDGET = 1500


def run(lead_s: float, hints: bool = True, seed: int = 0) -> tuple[Simulator, RunMetrics]:
    s = hinted(setups(["penelope"])[0], hints)
    agent = dataclasses.replace(s.spec.agent, prefetch_lead_s=lead_s)
    s = dataclasses.replace(s, spec=dataclasses.replace(s.spec, agent=agent))
    cfg = dataclasses.replace(sim_config(s, BUDGET, 1.0, 1, store=True), page_size=16)
    sim = Simulator(growing_workload(8, seed), cfg, SLOW, seed)
    m = sim.run()
    for rep in sim.replicas:
        rep.cache.check_integrity(request_pages=0)
        rep.scheduler._prefetch.check()
    return sim, m


def store_tokens(sim: Simulator) -> int:
    return sum(r.store_tokens for r in sim.requests)


def test_hinted_returns_load_less_from_the_store_with_a_lead() -> None:
    base, _ = run(0.0)
    sim, _ = run(5.0)
    stats = sim.replicas[0].scheduler._prefetch.stats
    assert base.replicas[0].scheduler._prefetch.stats.reads == 0
    assert stats.reads > 0 and stats.pages_installed > 0
    assert store_tokens(base) > 0
    assert store_tokens(sim) < store_tokens(base)
    tiers = sim.replicas[0].tiers
    assert tiers.stats.read_ahead_pages == stats.pages_read
    assert tiers.stats.install_pages == stats.pages_installed  # each a copy on the thread


def test_without_hints_nothing_is_read_ahead() -> None:
    sim, m = run(5.0, hints=False)
    base, mb = run(0.0, hints=False)
    assert sim.replicas[0].scheduler._prefetch.stats.reads == 0
    assert m.mean_ttft_s == mb.mean_ttft_s  # the same run to the last event


def test_a_read_ahead_takes_the_stores_channel_and_a_later_load_waits_for_it() -> None:
    now = [0.0]
    inner = NullTiers()
    inner.stored.update(("t", h) for h in range(8))
    tiers = TimedTiers(inner, SLOW, 16, lambda: now[0])
    read = tiers.read_ahead(np.arange(8, dtype=np.uint64), np.zeros((8, 16), np.int64), "t")
    assert read is not None
    took = SLOW.load_time(8 * 16, Tier.STORE)
    assert tiers.store_free == took and tiers.step_start(0.0) == 0.0  # off the step thread
    assert not read.done(took / 2) and read.done(took)
    assert list(read.found()) == [True] * 8
    tiers.begin()
    tiers.load_store(np.arange(2, dtype=np.uint64), np.zeros((2, 16)), "t", np.arange(2))
    assert tiers.step_start(0.0) == took + SLOW.load_time(2 * 16, Tier.STORE)


def test_null_tiers_find_only_what_was_spilled() -> None:
    inner = NullTiers()
    inner.stored.add(("t", 3))
    read = inner.read_ahead(np.array([3, 4], dtype=np.uint64), np.zeros((2, 16)), "t")
    assert isinstance(read, Found) and list(read.found()) == [True, False]
