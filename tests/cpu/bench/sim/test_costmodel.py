"""The stated cost models: real Qwen3 sizes, roofline sanity, the CPU fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.sim.costmodel import CpuCostModel, StepLoad, prefill_time
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel, param_count
from penelope_engine.cache.tier import Tier
from penelope_engine.core import core_costs
from penelope_engine.tiers.planner import CalibratedCost, choose


def _gpu(model: str = "qwen3-8b", hw: str = "h200") -> GpuCostModel:
    return GpuCostModel(QWEN3[model], HARDWARE[hw])


@pytest.mark.parametrize(
    ("name", "billions"), [("qwen3-8b", 8.19), ("qwen3-14b", 14.77), ("qwen3-32b", 32.76)]
)
def test_parameter_counts_match_the_published_models(name: str, billions: float) -> None:
    assert param_count(QWEN3[name]) / 1e9 == pytest.approx(billions, rel=0.01)


def test_kv_bytes_and_capacity() -> None:
    c8 = _gpu()
    assert c8.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2
    assert 600_000 < c8.kv_capacity_tokens() < 800_000  # ~107 GB of KV on an H200
    assert _gpu("qwen3-32b", "h100").kv_capacity_tokens() < 50_000  # few tokens fit


def test_attention_crossover_for_qwen3_8b_is_tens_of_k_tokens() -> None:
    c = _gpu()
    cross = c.attention_crossover()
    assert 15_000 < cross < 40_000
    assert c.token_cost(cross) == pytest.approx(2 * c.token_cost(0), rel=0.01)
    assert c.token_cost(105_000) > 3 * c.token_cost(0)  # a tail token at 105K


def test_attention_dominates_long_prefill() -> None:
    c = _gpu()
    short, long = prefill_time(c, 4096, 0), prefill_time(c, 4096, 100_000)
    assert long > 3 * short
    front = prefill_time(c, 2048, 20_000)  # rebuild a front vs a tail of the same length
    tail = prefill_time(c, 2048, 100_000)
    assert tail > 2 * front


def test_decode_is_memory_bound() -> None:
    c = _gpu("qwen3-8b", "h100")
    one = c.step_time(StepLoad.of([], [1000]))
    weights = c.weight_bytes / (c.hw.hbm_bytes_per_s * c.hw.hbm_eff)
    assert one == pytest.approx(c.hw.step_overhead_s + weights, rel=0.05)
    long_batch = c.step_time(StepLoad.of([], [100_000] * 32))
    assert long_batch > 5 * one  # KV reads of long contexts dominate
    assert _gpu("qwen3-8b", "h200").step_time(StepLoad.of([], [100_000] * 32)) < long_batch


def test_step_load_of_chunks() -> None:
    load = StepLoad.of([(4, 10)], [7])
    assert load.tokens == 5 and load.sequences == 2 and load.logit_rows == 2
    assert load.attention_pairs == sum(p + 1 for p in range(10, 14)) + 8
    assert load.kv_read_tokens == 14 + 8
    assert _gpu().step_time(StepLoad()) == 0.0


def test_copies_and_page_cost() -> None:
    c = _gpu()
    assert c.load_time(10_000, Tier.HOST) < c.load_time(10_000, Tier.STORE)
    assert c.load_time(20_000, Tier.HOST) > c.load_time(10_000, Tier.HOST)
    with pytest.raises(ValueError, match="tier"):
        c.load_time(1, Tier.DEVICE)
    _, cost = core_costs(c, CalibratedCost, 16)  # the policies' page cost in a simulated core
    assert cost(3) == pytest.approx(sum(c.token_cost(48 + i) for i in range(16)))
    assert cost(5000) > cost(0)


def test_cpu_fit_recovers_known_coefficients() -> None:
    truth = CpuCostModel(2e-3, 66e-6, 0.041e-6, 1e-4, kv_bytes_per_token=4096)
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(40):
        chunks = [(int(rng.integers(1, 512)), int(rng.integers(0, 4000)))]
        decodes = [int(rng.integers(1, 4000)) for _ in range(int(rng.integers(0, 8)))]
        load = StepLoad.of(chunks, decodes)
        samples.append((load, truth.step_time(load) * (1 + 0.01 * rng.standard_normal())))
    fit = CpuCostModel.fit(samples, kv_bytes_per_token=4096)
    assert fit.c_lin == pytest.approx(truth.c_lin, rel=0.1)
    # every sequence here samples a row: only the sum of the two per-sequence terms is defined
    assert fit.c_seq + fit.c_row == pytest.approx(truth.c_seq, rel=0.2)
    assert fit.c_attn == pytest.approx(truth.c_attn, rel=0.1)
    assert fit.token_cost(1000) == pytest.approx(truth.token_cost(1000), rel=0.1)


def test_cpu_fit_separates_logit_rows_from_tokens() -> None:
    truth = CpuCostModel(1e-3, 60e-6, 0.04e-6, 2e-5, kv_bytes_per_token=4096, c_row=8e-4)
    loads = [StepLoad.of([], [c] * b) for c in (100, 2000) for b in (1, 4, 16)]
    loads += [StepLoad.of([(m, a)], []) for m in (16, 256, 1024) for a in (0, 3000)]
    loads += [StepLoad(m, 0, m * (m + 1) // 2, m, 1) for m in (512, 1024)]  # mid-prompt chunks
    fit = CpuCostModel.fit([(x, truth.step_time(x)) for x in loads], kv_bytes_per_token=4096)
    for x in loads:
        assert fit.step_time(x) == pytest.approx(truth.step_time(x), rel=0.02)
    assert CpuCostModel.from_dict(fit.describe()) == fit


def test_cpu_fit_never_goes_negative_and_needs_samples() -> None:
    samples = [(StepLoad.of([(m, 0)], []), 1e-3 + 1e-5 * m) for m in (1, 2, 4, 8, 16)]
    fit = CpuCostModel.fit(samples, kv_bytes_per_token=1)
    assert min(fit.c_step, fit.c_lin, fit.c_attn, fit.c_seq) >= 0
    assert fit.step_time(samples[2][0]) == pytest.approx(samples[2][1], rel=0.05)
    with pytest.raises(ValueError, match="at least 5"):
        CpuCostModel.fit(samples[:4], kv_bytes_per_token=1)
    with pytest.raises(ValueError, match=">= 0"):
        CpuCostModel(-1.0, 0.0, 0.0, 0.0, kv_bytes_per_token=1)


def test_measured_row_costs_replace_the_linear_row_term_and_extrapolate() -> None:
    table = (19e-3, 38e-3, 57e-3, 30e-3)  # torch CPU GEMM: 2-3 rows cost more than 4
    cost = CpuCostModel(1e-3, 0.0, 0.0, 0.0, kv_bytes_per_token=1, c_row=1.0, row_costs=table)
    assert [cost.rows_time(k) for k in (0, 1, 3, 4)] == [0.0, 19e-3, 57e-3, 30e-3]
    assert cost.rows_time(6) == pytest.approx(30e-3 + 2 * 0.0)  # falling slope: flat past it
    rising = CpuCostModel(0, 0, 0, 0, kv_bytes_per_token=1, row_costs=(10e-3, 12e-3))
    assert rising.rows_time(5) == pytest.approx(18e-3)
    assert cost.step_time(StepLoad.of([], [10, 10, 10])) == pytest.approx(1e-3 + 57e-3)
    assert CpuCostModel.from_dict(json.loads(json.dumps(cost.describe()))) == cost


def test_cpu_fit_with_measured_row_costs_recovers_the_rest() -> None:
    table = (19e-3, 38e-3, 57e-3, 30e-3, 31e-3)
    truth = CpuCostModel(2e-3, 66e-6, 0.041e-6, 1e-4, kv_bytes_per_token=4096, row_costs=table)
    loads = [StepLoad.of([], [c] * b) for c in (100, 2000) for b in (1, 2, 3, 4, 5)]
    loads += [StepLoad.of([(m, a)], []) for m in (16, 256, 1024) for a in (0, 3000)]
    fit = CpuCostModel.fit(
        [(x, truth.step_time(x)) for x in loads], kv_bytes_per_token=4096, row_costs=table
    )
    assert fit.row_costs == table and fit.c_row == 0.0
    for x in loads:
        assert fit.step_time(x) == pytest.approx(truth.step_time(x), rel=0.02)
    # the linear model without the table misses the 2-3 row steps
    linear = CpuCostModel.fit([(x, truth.step_time(x)) for x in loads], kv_bytes_per_token=4096)
    worst = max(abs(linear.step_time(x) / truth.step_time(x) - 1) for x in loads)
    assert worst > 0.1


@pytest.mark.parametrize(
    "cost",
    [_gpu(), CpuCostModel(2e-3, 66e-6, 0.041e-6, 1e-4, kv_bytes_per_token=4096)],
    ids=["gpu", "cpu"],
)
def test_the_bench_models_are_the_planners_cost(cost: GpuCostModel | CpuCostModel) -> None:
    """recompute_s sums token_cost over the positions, load_s is load_time: the planner's."""
    for start, length in ((0, 1), (0, 64), (4096, 512), (100_000, 1000)):
        exact = sum(cost.token_cost(p) for p in range(start, start + length))
        assert cost.recompute_s(start, length) == pytest.approx(exact, rel=1e-12)
    assert cost.recompute_s(123, 0) == 0.0
    for tier in (Tier.HOST, Tier.STORE):
        assert cost.load_s(4096, tier) == cost.load_time(4096, tier)
    assert choose(cost, Tier.HOST, 50_000, 1 << 16) == "load"  # a long late segment


def test_the_planner_recomputes_a_short_early_segment_rather_than_wait_on_the_store() -> None:
    c = _gpu()  # 16 tokens: ~0.4 ms of prefill against the store's 1 ms latency
    assert c.recompute_s(0, 16) < c.hw.store_latency_s
    assert choose(c, Tier.STORE, 0, 16) == "recompute"
    assert choose(c, Tier.HOST, 0, 16) == "load"  # the host's latency is 20 us
