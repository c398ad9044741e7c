"""Session records stay bounded: sessionless requests keep none, idle sessions expire.

Driven through a real engine (tiny model): the records the cache, retention and
the handover keep must not grow with traffic, and the cache must keep serving
exactly (integrity checks after every request, pages reused across requests).
"""

from __future__ import annotations

import numpy as np
import pytest

from penelope_engine.cache.sessions import SessionInfo, expired
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.core import CoreHooks
from penelope_engine.engine import Engine
from penelope_engine.errors import ConfigError
from penelope_engine.protocol import GenerateRequest, SamplingParams

SAMPLING = SamplingParams(max_tokens=2, ignore_eos=True)
PREFIX = list(range(100, 124))  # 24 tokens = 6 pages of 4


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def engine(tiny_qwen3, clock: Clock, **cache: object) -> Engine:
    cfg = EngineConfig(cache=CacheConfig(page_size=4, **cache))  # type: ignore[arg-type]
    return Engine(cfg, loaded=tiny_qwen3, hooks=CoreHooks(clock=clock))


def turn(e: Engine, rid: str, prompt: list[int], session: str | None, clock: Clock) -> None:
    clock.t += 1.0
    out = e.generate_sync(GenerateRequest(rid, tuple(prompt), SAMPLING, session))
    assert out.finish_reason == "length"
    e.check_integrity()


def test_requests_without_a_session_keep_no_record(tiny_qwen3) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, clock, device_pages=256)
    rng = np.random.default_rng(0)
    for i in range(40):
        turn(e, f"r{i}", PREFIX + rng.integers(0, 500, 8).tolist(), None, clock)
    assert len(e.inspect().core.sessions) == 0
    assert e.inspect().core.scheduler._retention.own == {}
    # the prefix is still shared: the last request found it on the device
    assert e.inspect().core.scheduler.totals.device_tokens >= 39 * len(PREFIX)
    # the shared prefix node names two sessions, not forty
    first = next(iter(e.inspect().core.cache._tree.root.children.values()))
    assert len(first.sessions) == 2


def test_an_idle_session_without_pages_expires_after_the_ttl(tiny_qwen3) -> None:
    clock = Clock()
    # 12 pages: each session's 10 pages evict the one before it (no host tier)
    e = engine(tiny_qwen3, clock, device_pages=12, session_ttl_s=100.0)
    e.inspect().core.scheduler._records.sweep_every = 1
    rng = np.random.default_rng(1)
    prompts = {f"s{i}": rng.integers(0, 500, 36).tolist() for i in range(4)}
    for sid, p in prompts.items():
        turn(e, f"{sid}-0", p, sid, clock)
    assert set(e.inspect().core.sessions.ids()) == set(prompts)  # idle, but within the TTL
    clock.t += 200.0
    turn(e, "s3-1", prompts["s3"], "s3", clock)
    # s0 and s1 lost their pages to later sessions and idled past the TTL; s3 runs; a
    # record left of the idle ones is one still holding pages
    assert "s3" in e.inspect().core.sessions.ids()
    assert (
        e.inspect().core.sessions.get("s0") is None and e.inspect().core.sessions.get("s1") is None
    )
    book = e.inspect().core.sessions
    assert all(book.record(sid).holds_pages() for sid in book.ids() if sid != "s3")


def test_a_session_holding_pages_outlives_the_ttl(tiny_qwen3) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, clock, device_pages=256, session_ttl_s=10.0)
    e.inspect().core.scheduler._records.sweep_every = 1
    turn(e, "a-0", PREFIX + [1, 2, 3, 4], "a", clock)
    clock.t += 100.0
    turn(e, "b-0", PREFIX + [5, 6, 7, 8], "b", clock)
    assert set(e.inspect().core.sessions.ids()) == {"a", "b"}  # a's private page is still cached


def test_past_the_cap_the_least_recently_used_records_go(tiny_qwen3) -> None:
    clock = Clock()
    e = engine(tiny_qwen3, clock, device_pages=512, max_session_records=3)
    e.inspect().core.scheduler._records.sweep_every = 2
    for i in range(10):
        turn(e, f"s{i}-0", PREFIX + [i, i, i, i], f"s{i}", clock)
    assert len(e.inspect().core.sessions.ids()) <= 3 + 2
    assert "s9" in e.inspect().core.sessions.ids() and "s0" not in e.inspect().core.sessions.ids()
    # a forgotten session's pages still serve it when it returns, as a stand-in owner
    before = e.inspect().core.scheduler.totals.device_tokens
    turn(e, "s0-1", PREFIX + [0, 0, 0, 0, 7, 7, 7, 7], "s0", clock)
    assert e.inspect().core.scheduler.totals.device_tokens - before == len(PREFIX) + 4


def test_expired_keeps_live_sessions_and_orders_by_last_use() -> None:
    infos = {f"s{i}": SessionInfo(last_access=float(i)) for i in range(6)}
    # no pages anywhere (no leaf): every record idle past the TTL goes, except kept ones
    assert expired(infos, 100.0, 50.0, 10, keep={"s1"}) == ["s0", "s2", "s3", "s4", "s5"]
    # within the TTL: only the cap removes, oldest first, never a kept one
    assert expired(infos, 3.0, 50.0, 4, keep={"s0"}) == ["s1", "s2"]


def test_bad_record_settings_are_rejected() -> None:
    with pytest.raises(ConfigError, match="session_ttl_s"):
        CacheConfig(session_ttl_s=0)
    with pytest.raises(ConfigError, match="max_session_records"):
        CacheConfig(max_session_records=0)


def test_the_tree_forgets_idle_leaves_only_the_store_holds(tiny_qwen3, tmp_path) -> None:
    clock = Clock()
    cache = dict(device_pages=24, store_uri=str(tmp_path), session_ttl_s=50.0)
    e = engine(tiny_qwen3, clock, **cache)
    e.inspect().core.scheduler._records.sweep_every = 1
    first = list(range(600, 664))  # no shared prefix: its nodes hang from the root
    turn(e, "old-0", first, "old", clock)
    assert e.store.flush_store_writes(10.0)  # its pages are written behind to the store
    rng = np.random.default_rng(2)
    for i in range(3):  # other sessions take the device: old's pages are store-only now
        turn(e, f"n{i}-0", PREFIX + rng.integers(0, 500, 40).tolist(), f"n{i}", clock)
    assert e.store.flush_store_writes(10.0)
    size = e.inspect().core.cache._tree.size
    clock.t += 100.0
    turn(e, "n2-1", PREFIX + [1] * 8, "n2", clock)
    assert e.inspect().core.sessions.get("old") is None
    assert e.inspect().core.cache._tree.size < size  # old's store-only private leaf left the tree
    # returning, old finds its history in the store past the tree's match
    out = e.generate_sync(GenerateRequest("old-1", tuple(first + [9] * 8), SAMPLING, "old"))
    e.check_integrity()
    assert out.usage.store_tokens >= 32
