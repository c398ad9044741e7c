"""Prefetch in a real tiny engine: a hinted session's store pages come back into the
host tier on the read-ahead thread before it returns, exactly.

Page size 4, a device and a host of 16 pages each, a store, and a clock the test
sets. Each turn's prompt is 40 random tokens (10 pages). Session a says it is
back in 100 s; b, c and d, a second apart, say nothing (the prior: 10 s), so
the return-aware policy spills a's pages to the store first. At 60 s b, c and d
are overdue (expected later than a) and a is due within the lead: the next
step reads a's pages ahead, into host pages b, c and d give up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from penelope_engine.cache.tier import Tier
from penelope_engine.config import AgentConfig, CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.core import CoreHooks
from penelope_engine.engine import Engine
from penelope_engine.hints import SessionHints
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest, RequestOutput, SamplingParams

SAMPLING = SamplingParams(max_tokens=2, ignore_eos=True)
BACK_IN_100_S = SessionHints(expected_gap_s=100.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def engine(tiny_qwen3: LoadedModel, store: Path | None, lead_s: float, clock: Clock) -> Engine:
    uri = str(store) if store is not None else None
    cc = CacheConfig(4, 16, 16, "return_aware", store_uri=uri, write_behind_bytes=0)
    agent = AgentConfig(prefetch_lead_s=lead_s)
    config = EngineConfig(cache=cc, scheduler=SchedulerConfig(agent=agent))
    return Engine(config, loaded=tiny_qwen3, hooks=CoreHooks(clock=clock))


def prompt(seed: int, n: int = 40) -> tuple[int, ...]:
    return tuple(np.random.default_rng(seed).integers(0, 5000, n).tolist())


def turn(
    e: Engine, rid: str, tokens: tuple[int, ...], sid: str, hints: SessionHints | None = None
) -> RequestOutput:
    hints = hints or SessionHints()
    req = GenerateRequest(rid, tokens, SAMPLING, sid, "default", "tool_use", hints=hints)
    out = e.generate_sync(req)
    e.check_integrity()
    return out


def back(first: RequestOutput) -> tuple[int, ...]:
    """Session a's next prompt: its first turn, the reply, 8 new tokens."""
    return prompt(0) + first.token_ids + prompt(20)[:8]


def tiers_of(e: Engine, sid: str) -> dict[Tier, int]:
    """Pages of the session's own path per location."""
    info = e.inspect().core.sessions.get(sid)
    assert info is not None and info.leaf is not None
    where = np.concatenate([n.where() for n in _path(info.leaf)])
    return {t: int((where == t).sum()) for t in (Tier.DEVICE, Tier.HOST, Tier.STORE)}


def _path(leaf):  # noqa: ANN001, ANN202
    out = []
    while leaf.parent is not None:
        out.append(leaf)
        leaf = leaf.parent
    return out[::-1]


def pushed_out(e: Engine, clock: Clock) -> RequestOutput:
    """Session a's turn, then three others that push its pages to the store; 60 s on."""
    first = turn(e, "a1", prompt(0), "a", BACK_IN_100_S)
    for i, sid in enumerate("bcd"):
        clock.now += 1.0
        turn(e, f"{sid}1", prompt(i + 1), sid)
    if e.inspect().core.cache.has_store:
        assert tiers_of(e, "a")[Tier.STORE] == 10  # only the store holds its history
    clock.now = 60.0
    return first


def others_step(e: Engine, clock: Clock) -> None:
    """Three short sessions back in 1,000 s take turns a second apart; their steps read
    a's pages ahead (each read waited for, so the next step installs it)."""
    for sid in "efg":
        clock.now += 1.0
        turn(e, f"{sid}1", prompt(ord(sid), 8), sid, SessionHints(expected_gap_s=1000.0))
        flight = e.inspect().core.scheduler._prefetch.flight
        if flight is not None:
            assert flight.read.wait(10.0)


def session_returns(e: Engine, clock: Clock) -> tuple[RequestOutput, RequestOutput]:
    """Session a pushed out, others' turns (their steps read a's pages), a back."""
    first = pushed_out(e, clock)
    others_step(e, clock)
    second = turn(e, "a2", back(first), "a")
    return first, second


def test_a_hinted_session_finds_its_store_pages_in_the_host_when_it_returns(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    ref_first, ref_second = session_returns(engine(tiny_qwen3, None, 0.0, Clock()), Clock())
    clock = Clock()
    e = engine(tiny_qwen3, tmp_path, 50.0, clock)
    first, second = session_returns(e, clock)
    stats = e.inspect().core.scheduler._prefetch.stats
    assert stats.pages_installed == 10 and 1 < stats.reads <= 4  # a read takes 4 at most
    assert second.usage.store_tokens == 0  # nothing read on the turn's own path
    assert second.usage.host_tokens == 40
    assert second.usage.recomputed_tokens == 0
    assert (first.token_ids, second.token_ids) == (ref_first.token_ids, ref_second.token_ids)
    e.store.close()


def test_without_a_lead_the_same_return_reads_the_store_on_its_own_path(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, tmp_path, 0.0, clock)
    _, second = session_returns(e, clock)
    assert e.inspect().core.scheduler._prefetch.stats.reads == 0
    assert second.usage.store_tokens == 40


def test_a_session_without_a_hint_is_not_read_ahead(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, tmp_path, 1000.0, clock)
    for i, sid in enumerate("abcd"):  # no expected gaps: their returns are guesses
        clock.now += 1.0
        turn(e, f"{sid}1", prompt(i), sid)
    clock.now = 60.0
    turn(e, "e1", prompt(9), "e")
    assert tiers_of(e, "a")[Tier.STORE] > 0
    assert e.inspect().core.scheduler._prefetch.stats.reads == 0


def test_a_session_due_after_every_host_page_gets_no_read(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, tmp_path, 1000.0, clock)
    pushed_out(e, clock)
    clock.now = 5.0  # b, c and d are due before a: nothing may go to make room
    turn(e, "e1", prompt(9), "e", SessionHints(expected_gap_s=1.0))
    assert e.inspect().core.scheduler._prefetch.stats.reads == 0
    assert tiers_of(e, "a")[Tier.STORE] == 10


def test_a_read_whose_pages_came_back_meanwhile_installs_nothing(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, tmp_path, 50.0, clock)
    first = pushed_out(e, clock)
    prefetch = e.inspect().core.scheduler._prefetch
    prefetch.step(clock.now, set())  # a step with nothing queued: the read starts
    flight = prefetch.flight
    assert flight is not None and flight.read.wait(10.0)
    prefetch.flight = None  # held back: the session returns first
    second = turn(e, "a2", back(first), "a")
    assert second.usage.store_tokens == 40
    prefetch.flight = flight
    prefetch.step(clock.now, set())  # installs what is still only in the store: nothing
    assert prefetch.stats.pages_installed == 0
    assert prefetch.stats.pages_stale == prefetch.stats.pages_read > 0
    e.check_integrity()


def test_a_session_that_came_back_or_was_forgotten_is_no_longer_tracked(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, tmp_path, 50.0, clock)
    prefetch = e.inspect().core.scheduler._prefetch
    first = turn(e, "a1", prompt(0), "a", BACK_IN_100_S)
    turn(e, "b1", prompt(1), "b", BACK_IN_100_S)
    assert prefetch.tracked == 2
    clock.now = 60.0  # both due within the lead
    turn(e, "a2", back(first), "a")  # a is back, unhinted
    clock.now = 61.0
    turn(e, "c1", prompt(2, 8), "c")  # the next plan drops a
    assert prefetch.tracked == 1
    e.inspect().core.scheduler._records.forget(["b"])
    assert prefetch.tracked == 0
    prefetch.check()


def test_a_new_hint_wins_over_the_last_gaps_when_both_are_due(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, tmp_path, 50.0, clock)
    first = turn(e, "a1", prompt(0), "a", SessionHints(expected_gap_s=100.0))  # due at 100
    clock.now = 10.0  # back early; the next turn says 5 s: due at 15
    turn(e, "a2", back(first), "a", SessionHints(expected_gap_s=5.0))
    clock.now = 60.0  # both due times are within the lead: only the newer one counts
    turn(e, "c1", prompt(2, 8), "c")
    assert e.inspect().core.scheduler._prefetch.tracked == 1


def test_prefetch_lead_must_be_finite_and_not_negative() -> None:
    for bad in (-1.0, float("inf")):
        with pytest.raises(ValueError, match="prefetch_lead_s"):
            AgentConfig(prefetch_lead_s=bad)


class StoreCost:
    """A planner cost whose store loads take `latency_s` + `per_token_s` per token."""

    def __init__(self, latency_s: float, per_token_s: float) -> None:
        self.latency_s, self.per_token_s = latency_s, per_token_s

    def recompute_s(self, start: int, length: int) -> float:
        return 1.0 * length

    def load_s(self, length: int, tier: Tier) -> float:
        return self.latency_s + self.per_token_s * length


def test_a_read_holds_the_stores_channel_at_most_max_read_s(
    tiny_qwen3: LoadedModel, tmp_path: Path
) -> None:
    from penelope_engine.sched import prefetch

    p = engine(tiny_qwen3, tmp_path, 20.0, Clock()).inspect().core.scheduler._prefetch
    share = max(1, int(prefetch.MAX_READ_SHARE * 16))  # 4 of the 16 host pages
    assert share == 4
    slow = prefetch.MAX_READ_S / 3  # a page (4 tokens) of store read: three fill the time
    p.cost = lambda: StoreCost(0.0, slow / 4)
    assert p.read_cap() == 3
    p.cost = lambda: StoreCost(0.45 * prefetch.MAX_READ_S, slow / 4)  # latency first: 1.65
    assert p.read_cap() == 1
    p.cost = lambda: StoreCost(0.0, 10 * prefetch.MAX_READ_S)  # one page takes longer: still 1
    assert p.read_cap() == 1
    p.cost = lambda: StoreCost(0.0, slow / 40)  # a fast store: the host share bounds it
    assert p.read_cap() == share
    p.cost = lambda: StoreCost(0.0, 0.0)  # a store that costs nothing: the host share too
    assert p.read_cap() == share
