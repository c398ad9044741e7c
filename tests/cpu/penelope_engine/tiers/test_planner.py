"""Load or recompute: the planner's choice, its calibration, and what a failed load does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from penelope_engine.cache.tier import Tier
from penelope_engine.engine import Engine
from penelope_engine.fit import nonneg_lstsq
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.tiers.planner import CalibratedCost, CostCalibrator, choose, fit_prefill

# Loading costs a fixed 2 ms plus bandwidth; recomputing a token costs 10 us plus
# 1 ns per earlier key.
COST = CalibratedCost(
    c_lin=10e-6, c_attn=1e-9, host_bytes_per_s=1e9, load_latency_s=2e-3, kv_bytes_per_token=4096
)


def test_a_short_early_segment_is_recomputed_and_a_long_late_one_loaded() -> None:
    assert choose(COST, Tier.HOST, start=0, length=16) == "recompute"  # 0.16 ms < 2.07 ms
    assert choose(COST, Tier.HOST, start=60_000, length=4096) == "load"  # 25 ms > 18.8 ms


def test_the_prefill_fit_recovers_the_constants_it_was_given() -> None:
    truth = CalibratedCost(c_lin=70e-6, c_attn=0.05e-6)
    samples = [(a, m, truth.recompute_s(a, m)) for a in (0, 512, 2048, 8192) for m in (16, 256)]
    c_lin, c_attn = fit_prefill(samples)
    assert np.isclose(c_lin, 70e-6, rtol=1e-6) and np.isclose(c_attn, 0.05e-6, rtol=1e-6)


def test_the_prefill_fit_never_goes_negative() -> None:
    # times that fall with the offset: plain least squares gives c_attn < 0
    samples = [(a, 64, 5e-3 - 1e-7 * a) for a in (0, 1000, 2000, 4000)]
    c_lin, c_attn = fit_prefill(samples)
    assert c_attn == 0.0 and c_lin > 0
    assert fit_prefill([]) == (0.0, 0.0)


def test_nonneg_lstsq_drops_the_negative_column_and_refits_the_rest() -> None:
    x = np.array([[1.0, 1e6, 0.0], [1.0, 2e6, 1.0], [1.0, 3e6, 0.0], [1.0, 4e6, 1.0]])
    truth = np.array([2.0, 3e-6, 0.5])
    assert np.allclose(nonneg_lstsq(x, x @ truth), truth)  # columns of very different scales
    y = x @ np.array([2.0, 3e-6, -0.5])
    coef = nonneg_lstsq(x, y)
    assert coef[2] == 0.0 and (coef >= 0).all()
    assert np.allclose(coef[:2], np.linalg.lstsq(x[:, :2], y, rcond=None)[0])


def test_the_calibrator_refits_from_observed_steps() -> None:
    cal = CostCalibrator(CalibratedCost(c_lin=1.0, c_attn=1.0), refit_every=4)
    truth = CalibratedCost(c_lin=50e-6, c_attn=0.02e-6)
    for a in (0, 1000, 4000, 9000):
        cal.observe_prefill(a, 128, truth.recompute_s(a, 128))
    assert np.isclose(cal.cost.c_lin, 50e-6, rtol=1e-3)
    cal.observe_copy(Tier.HOST, 10**9, 0.5)
    assert cal.cost.host_bytes_per_s < CalibratedCost().host_bytes_per_s  # moved towards 2 GB/s


def test_a_failed_host_load_is_recomputed_and_generation_stays_exact(
    make_engine: Callable[..., Engine],
) -> None:
    sampling = SamplingParams(max_tokens=2, ignore_eos=True)
    prompts = [tuple(range(1000 + 100 * i, 1040 + 100 * i)) for i in range(3)]

    def run(engine: Engine) -> list[tuple[int, ...]]:
        out = []
        for turn in range(2):
            for i, p in enumerate(prompts):
                req = GenerateRequest(f"{i}-{turn}", p, sampling, session_id=f"s{i}")
                out.append(engine.generate_sync(req).token_ids)
                engine.check_integrity()
        return out

    reference = run(make_engine(device_pages=256))
    # Without the fault the same set-up loads from the host tier (84 tokens today):
    # every token it reports as served from the host came through a host copy.
    loaded = make_engine(device_pages=24, host_pages=64)
    copied: list[int] = []
    copy = loaded.inspect().core.tiers.host_to_device

    def counted(host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        copied.append(len(host_pages))
        return copy(host_pages, device_pages)

    loaded.inspect().core.tiers.host_to_device = counted
    assert run(loaded) == reference
    served = loaded.stats().tokens.host_tokens
    assert served > 0, "the fault-free run never loaded from the host"
    assert sum(copied) * loaded.config.cache.page_size == served
    engine = make_engine(device_pages=24, host_pages=64)
    engine.inspect().core.tiers.host_to_device = lambda host_pages, device_pages: (
        False
    )  # the copy fails
    assert run(engine) == reference
    stats = engine.stats()
    assert stats.tokens.host_tokens == 0 and stats.tokens.recomputed_tokens > 0
