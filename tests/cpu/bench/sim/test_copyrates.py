"""`MeasuredCopies`: a set-up's host loads and device-to-host copies cost what its engine
was measured to take (`CopyRates`); compute and store loads stay the roofline's."""

from __future__ import annotations

import dataclasses

import pytest

from bench.experiments.peers import sim_config
from bench.sim.config import SimConfig
from bench.sim.copyrates import COPY_RATES, CopyRates, MeasuredCopies
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.sim.setups import setups
from bench.sim.simulate import simulate
from penelope_engine.cache.tier import Tier
from tests.cpu.bench.sim.sim_testkit import growing_workload

COST = GpuCostModel(QWEN3["qwen3-8b"], HARDWARE["h200"])


def test_copies_cost_latency_plus_bytes_over_the_measured_rate() -> None:
    rates = CopyRates(1e-3, 40e9, 4e-3, 20e9)
    m = MeasuredCopies(COST, rates, "x")
    nbytes = 4096 * COST.kv_bytes_per_token
    assert m.load_time(4096, Tier.HOST) == pytest.approx(1e-3 + nbytes / 40e9)
    assert m.load_s(4096, Tier.HOST) == m.load_time(4096, Tier.HOST)
    assert m.offload_time(4096) == pytest.approx(4e-3 + nbytes / 20e9)
    assert m.load_time(4096, Tier.STORE) == COST.load_time(4096, Tier.STORE)  # not measured
    assert m.token_cost(1000) == COST.token_cost(1000) and m.num_layers == COST.num_layers
    assert m.describe()["copy_rates"]["d2h_bytes_per_s"] == 20e9


def test_the_shipped_rates_are_the_h100_measurement_and_bad_ones_are_refused() -> None:
    (penelope,) = setups(["penelope"])
    assert penelope.spec.copy_rates == "torch-tiers-h100"
    assert sim_config(penelope, 1024, 2.0, 2).copy_rates == "torch-tiers-h100"
    (peer,) = setups(["sglang-hicache/llm_d"])
    assert peer.spec.copy_rates is None  # the peers keep the roofline's copies
    h100 = COPY_RATES.get("torch-tiers-h100")
    # the warm fit's host loads are within 2 % of the roofline's charge at 16K tokens;
    # device-to-host is about 2.4x it
    m = MeasuredCopies(COST, h100, "torch-tiers-h100")
    assert m.load_time(16384, Tier.HOST) == pytest.approx(COST.load_time(16384, Tier.HOST), 0.02)
    assert 2.2 < m.offload_time(16384) / COST.offload_time(16384) < 2.6
    with pytest.raises(ValueError, match="d2h_bytes_per_s"):
        CopyRates(0.0, 1e9, 0.0, 0.0)
    with pytest.raises(KeyError, match="no-such"):
        SimConfig(copy_rates="no-such")


def test_the_registered_rates_reach_the_replicas_and_slower_copies_cost_ttft() -> None:
    wl = growing_workload(6)
    base = SimConfig(
        policy="penelope", tiers="gpu+cpu", device_budget_tokens=1024, host_budget_tokens=4096,
        page_size=32,
    )  # fmt: skip
    roofline = simulate(wl, base, COST, 0)
    measured = simulate(wl, dataclasses.replace(base, copy_rates="torch-tiers-h100"), COST, 0)
    slow = simulate(wl, base, MeasuredCopies(COST, CopyRates(0.0, 1e9, 0.0, 1e9), "slow"), 0)
    assert roofline.requests == measured.requests == slow.requests
    assert measured.mean_ttft_s != roofline.mean_ttft_s  # the config's rates were used
    assert slow.mean_ttft_s > roofline.mean_ttft_s


def test_the_copy_variants_change_only_the_copy_rates() -> None:
    full, roofline, cold = setups(
        ["penelope", "penelope (copies roofline)", "penelope (copies cold)"]
    )
    assert roofline.spec == dataclasses.replace(full.spec, copy_rates=None)
    assert cold.spec == dataclasses.replace(full.spec, copy_rates="torch-tiers-h100-cold")


def test_the_overlap_variants_change_one_lever_each() -> None:
    full, lw, aw = setups(["penelope", "penelope (layerwise loads)", "penelope (async writes)"])
    assert lw.spec == dataclasses.replace(full.spec, layerwise_loads=True)
    assert aw.spec == dataclasses.replace(full.spec, async_writes=True)
