"""Agent-aware scheduling levers in the scheduling core: queue order, backfill, retention."""

from __future__ import annotations

import numpy as np
import pytest

from bench.sim.tiers import NullTiers
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.config import AgentConfig, SchedulerConfig
from penelope_engine.errors import ConfigError
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.sched.agent import best_ttl, prefill_estimate_s, queue_key
from penelope_engine.sched.scheduler import Scheduler
from penelope_engine.sched.sequence import Sequence
from penelope_engine.tiers.planner import CalibratedCost

PS = 4


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(
    device_pages: int, host_pages: int = 0, max_running: int = 8, max_prefills: int = 0, **agent
) -> Scheduler:
    clock = Clock()
    book = Sessions(clock)
    cache = PrefixCache(PS, device_pages, host_pages, "lru", io=NullTiers(), sessions=book)
    cfg = SchedulerConfig(
        max_batch_tokens=4096,
        max_running=max_running,
        prefill_chunk=4096,
        max_prefills=max_prefills,
        agent=AgentConfig(**agent),
    )
    return Scheduler(
        cfg,
        cache,
        book,
        PageHasher(PS, "t"),
        NullTiers(),
        CalibratedCost,
        (),
        1 << 20,
        write_through=host_pages > 0,
        clock=clock,
    )


def request(
    sched: Scheduler,
    sid: str,
    turn: int,
    prompt: list[int],
    out: int = 2,
    stop: str | None = "tool_use",
) -> Sequence:
    req = GenerateRequest(
        f"{sid}:{turn}",
        tuple(prompt),
        SamplingParams(max_tokens=out, ignore_eos=True),
        session_id=sid,
        stop_reason_hint=stop,
    )
    seq = Sequence(
        req,
        sched._hasher.hashes(np.asarray(prompt, np.int32)),
        list(prompt),
        arrival=sched._clock(),
    )
    sched.add(seq)
    return seq


def step(sched: Scheduler) -> list[Sequence]:
    items = sched.schedule()
    sched._cache.check_integrity(sched.request_pages())
    return sched.commit(items, [7 if it.wants_token else None for it in items])


def drain(sched: Scheduler, limit: int = 200) -> None:
    for _ in range(limit):
        if not sched.has_work():
            return
        step(sched)
        sched._clock.t += 0.01  # type: ignore[attr-defined]
    raise AssertionError("the scheduler did not drain")


def toks(seed: int, n: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(10, 1000, n)]


def test_queue_keys() -> None:
    assert queue_key(AgentConfig(), 5.0, 1.0, 0.0) == 5.0
    assert queue_key(AgentConfig(admission="program"), 5.0, 1.0, 0.0) == 1.0
    assert queue_key(AgentConfig(admission="aged", age_cap_s=2.0), 5.0, 1.0, 0.0) == 3.0
    assert queue_key(AgentConfig(admission="aged", age_cap_s=10.0), 5.0, 1.0, 0.0) == 1.0
    assert queue_key(AgentConfig(admission="shortest"), 5.0, 1.0, 0.25) == 0.25
    assert queue_key(AgentConfig(size_weight=4.0), 5.0, 1.0, 0.25) == 6.0
    with pytest.raises(ConfigError):
        AgentConfig(admission="lifo")
    with pytest.raises(ConfigError):
        AgentConfig(retention="forever")


@pytest.mark.parametrize(
    ("admission", "age_cap", "first"),
    [("fcfs", 60.0, "b"), ("program", 60.0, "a"), ("aged", 60.0, "a"), ("aged", 0.5, "b")],
)
def test_returning_turn_goes_ahead_of_a_newer_session(admission, age_cap, first) -> None:
    sched = make(64, max_running=1, admission=admission, age_cap_s=age_cap)
    request(sched, "a", 0, toks(1, 16))
    drain(sched)
    sched._clock.t = 1.0  # type: ignore[attr-defined]
    request(sched, "c", 0, toks(3, 16), out=50)  # holds the only running slot
    step(sched)
    sched._clock.t = 2.0  # type: ignore[attr-defined]
    b = request(sched, "b", 0, toks(2, 16))  # a new session
    sched._clock.t = 3.0  # type: ignore[attr-defined]
    a = request(sched, "a", 1, toks(1, 16) + [7, 7] + toks(4, 8))  # a's next turn, later
    drain(sched)
    assert a.admitted_at is not None and b.admitted_at is not None
    assert (a.admitted_at < b.admitted_at) == (first == "a")


def _queue_behind_a_long_prefill(**agent) -> tuple[Scheduler, Sequence, Sequence]:
    """One prefill at a time: a long request runs; a long then a short one queue behind."""
    sched = make(256, max_prefills=1, **agent)
    sched.config = SchedulerConfig(  # chunks of 16: the first prefill takes several steps
        max_batch_tokens=16, max_running=8, prefill_chunk=16, max_prefills=1,
        agent=sched.config.agent,
    )  # fmt: skip
    request(sched, "run", 0, toks(1, 64))
    step(sched)
    sched._clock.t = 1.0  # type: ignore[attr-defined]
    long = request(sched, "long", 0, toks(2, 96))
    sched._clock.t = 2.0  # type: ignore[attr-defined]
    short = request(sched, "short", 0, toks(3, 8))
    return sched, long, short


def test_shortest_first_admits_the_short_request_before_a_longer_earlier_one() -> None:
    sched, long, short = _queue_behind_a_long_prefill(admission="shortest")
    drain(sched)
    assert short.admitted_at is not None and long.admitted_at is not None
    assert short.admitted_at < long.admitted_at
    fcfs, long, short = _queue_behind_a_long_prefill(admission="fcfs")
    drain(fcfs)
    assert long.admitted_at < short.admitted_at  # type: ignore[operator]


def test_a_request_that_waited_starvation_s_is_passed_by_nobody() -> None:
    """Shortest first never starves a long request: once it has waited `starvation_s`,
    it goes before every shorter request that waited less."""
    sched, long, short = _queue_behind_a_long_prefill(admission="shortest", starvation_s=1.5)
    sched._clock.t = 3.0  # type: ignore[attr-defined]  # long has waited 2 s, short 1 s
    drain(sched)
    assert long.admitted_at is not None and short.admitted_at is not None
    assert long.admitted_at < short.admitted_at


def test_prefill_estimate_counts_holes_and_the_tail_not_what_the_cache_holds() -> None:
    sched = make(64)
    prompt = toks(1, 32)
    request(sched, "a", 0, prompt)
    drain(sched)
    cost = CalibratedCost()
    again = request(sched, "a", 1, prompt + toks(2, 16))
    # 8 pages cached (32 tokens): the estimate is the 16 new tokens at positions 32..47
    assert prefill_estimate_s(again, sched._cache, cost) == pytest.approx(cost.recompute_s(32, 16))
    fresh = request(sched, "z", 0, toks(9, 48))
    assert prefill_estimate_s(fresh, sched._cache, cost) == pytest.approx(cost.recompute_s(0, 48))
    with pytest.raises(ConfigError):
        AgentConfig(size_weight=-1.0)


@pytest.mark.parametrize(("weight", "small_first"), [(0.0, False), (1e9, True)])
def test_size_weight_lets_a_small_turn_pass_a_long_prefill(weight, small_first) -> None:
    sched = make(256, max_running=1, size_weight=weight)
    hold = request(sched, "c", 0, toks(3, 16), out=20)  # holds the only running slot
    step(sched)
    big = request(sched, "big", 0, toks(5, 400))
    sched._clock.t = 0.5  # type: ignore[attr-defined]
    small = request(sched, "small", 0, toks(6, 8))
    drain(sched)
    assert hold.admitted_at is not None
    assert big.admitted_at is not None and small.admitted_at is not None
    assert (small.admitted_at < big.admitted_at) == small_first


@pytest.mark.parametrize(
    ("backfill", "waited", "passes"), [(False, 0, False), (True, 0, True), (True, 40, False)]
)
def test_backfill_passes_a_head_that_does_not_fit(backfill, waited, passes) -> None:
    sched = make(12, backfill=backfill, starvation_s=30.0)
    big = request(sched, "big", 0, toks(5, 28), out=8)  # 7-9 of 12 pages while it runs
    step(sched)
    head = request(sched, "head", 0, toks(6, 28))  # needs 8 more: does not fit
    sched._clock.t = float(waited)  # type: ignore[attr-defined]
    small = request(sched, "small", 0, toks(7, 6))  # needs 2: fits
    step(sched)
    assert big in sched.running and head in sched.waiting
    assert (small in sched.running) == passes
    drain(sched)
    assert not sched.has_work()


def test_best_ttl_pays_only_when_returns_are_likely_and_cheap_to_wait_for() -> None:
    gaps = np.array([1.0, 1.0, 2.0, 2.0, 3.0, 300.0, 400.0, 500.0])
    # reload 10 s, pin holds 10 % of the device: wait out the short gaps, not the long ones
    assert best_ttl(gaps, 10.0, 0.1, 1.0) == 3.0
    assert best_ttl(gaps, 0.0, 0.1, 1.0) == 0.0  # nothing to save
    assert best_ttl(gaps, 10.0, 1.0, 10.0) == 0.0  # memory too dear
    assert best_ttl(np.array([]), 10.0, 0.1, 1.0) == 0.0


@pytest.mark.parametrize("retention", ["ttl", "return_aware"])
def test_pin_keeps_a_tool_calling_session_on_the_device(retention) -> None:
    sched = make(16, retention=retention, default_ttl_s=5.0)
    a = toks(8, 24)
    request(sched, "a", 0, a, out=1, stop="tool_use")
    drain(sched)
    assert "a" in sched._retention.pins
    request(sched, "x", 0, toks(9, 40), out=1)  # needs every page: only a's would go
    drain(sched)
    back = request(sched, "a", 1, a + [7] + toks(10, 3), out=1)
    assert "a" not in sched._retention.pins  # the return releases the pin
    drain(sched)
    assert back.usage.device_tokens == 24


def test_no_pin_after_end_turn_and_pins_expire() -> None:
    sched = make(16, retention="ttl", default_ttl_s=5.0)
    request(sched, "h", 0, toks(11, 24), out=1, stop="end_turn")
    request(sched, "t", 0, toks(12, 24), out=1, stop="tool_use")
    drain(sched)
    assert set(sched._retention.pins) == {"t"}
    pinned = sched._cache.evictable()
    sched._clock.t = 10.0  # type: ignore[attr-defined]
    sched.schedule()
    assert not sched._retention.pins and sched._cache.evictable() > pinned


@pytest.mark.parametrize(("retention", "waits"), [("ttl", True), ("return_aware", False)])
def test_only_return_aware_pins_yield_to_the_queue(retention, waits) -> None:
    sched = make(12, retention=retention, default_ttl_s=5.0, max_pinned_fraction=1.0)
    request(sched, "p", 0, toks(13, 24), out=1)
    drain(sched)
    assert "p" in sched._retention.pins
    q = request(sched, "q", 0, toks(14, 40), out=1)  # needs 11 of 12 pages
    step(sched)
    assert (q in sched.waiting) == waits
    if waits:
        assert sched.next_ready() == pytest.approx(sched._retention.pins["p"].expires)
        assert sched.break_deadlock() is None  # not a deadlock: the pin expires
        sched._clock.t = 6.0  # type: ignore[attr-defined]
    drain(sched)
    assert q.finish_reason == "length"


def test_park_on_preempt_writes_the_preempted_path_to_the_host() -> None:
    for park in (False, True):
        sched = make(32, host_pages=32, park_on_preempt=park)
        seq = request(sched, "a", 0, toks(15, 16), out=10)
        step(sched)
        step(sched)
        sched.preempt(seq)
        assert (sched._cache._host.num_used > 0) == park
        drain(sched)
