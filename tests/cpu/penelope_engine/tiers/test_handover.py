"""Sessions that change replica load their history from the shared store, exactly.

Two engines on one store stand for two replicas; both start before anything is
written, so what the second finds it finds through write-behind and records,
not by scanning the store when it opened.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cache_store import StoreLocation
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.protocol import GenerateRequest, SamplingParams

PS = 4
SAMPLING = SamplingParams(max_tokens=3, ignore_eos=True)
TURN1 = tuple(range(300, 341))
TURN2_NEW = tuple(range(700, 709))
SYSTEM = tuple(range(900, 924))  # 6 pages
FLUSH_S = 30.0


def _engine(tiny_qwen3, store: StoreLocation | None, **cache: object) -> Engine:
    where = {}
    if store is not None:
        where = dict(store_uri=store.uri, store_endpoint=store.endpoint, store_region=store.region)
    config = CacheConfig(PS, 64, 32, "penelope", **where, **cache)  # type: ignore[arg-type]
    return Engine(EngineConfig(cache=config), loaded=tiny_qwen3)


@pytest.fixture(params=["local", "s3"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> StoreLocation:
    if request.param == "local":
        return StoreLocation(str(tmp_path / "shared"))
    return request.getfixturevalue("s3_store")


def _two_turns(first: Engine, second: Engine, tenant: str = "default"):
    one = first.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent", tenant))
    assert first.store.flush_store_writes(FLUSH_S)
    prompt2 = TURN1 + one.token_ids + TURN2_NEW
    two = second.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent", tenant))
    return one.token_ids + two.token_ids, two.usage


def test_a_moved_session_loads_its_history_written_behind_and_is_identical(
    tiny_qwen3, shared: StoreLocation
) -> None:
    reference, _ = _two_turns(*[_engine(tiny_qwen3, None)] * 2)
    a, b = _engine(tiny_qwen3, shared), _engine(tiny_qwen3, shared)  # b is up before a writes
    tokens, usage = _two_turns(a, b)
    b.check_integrity()
    assert tokens == reference
    assert usage.store_tokens >= 40  # the 44-token history, whole pages of it
    assert usage.recomputed_tokens == 0
    assert usage.new_tokens <= len(TURN2_NEW) + PS
    assert a._store is not None and a._store.stats().records_written >= 1
    written = a.stats()
    assert written.store_written_pages >= 40 // PS and written.write_behind_pages == 0


def test_history_the_fleet_held_counts_as_recomputed_where_the_store_lost_it(
    tiny_qwen3, tmp_path: Path
) -> None:
    shared = StoreLocation(str(tmp_path))
    a, b = _engine(tiny_qwen3, shared), _engine(tiny_qwen3, shared)
    one = a.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
    assert a.store.flush_store_writes(FLUSH_S)
    for f in tmp_path.rglob("*.arrow"):  # the store's budget (or an operator) dropped it all
        f.unlink()
    prompt2 = TURN1 + one.token_ids + TURN2_NEW
    usage = b.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent")).usage
    assert usage.store_tokens == 0
    assert usage.recomputed_tokens >= 40  # the fleet had it: rebuilt, not new
    assert usage.new_tokens <= len(TURN2_NEW) + PS


def test_public_pages_cross_tenants_and_replicas_only_where_declared(
    tiny_qwen3, shared: StoreLocation
) -> None:
    declared = {"public_prefixes": (SYSTEM,)}
    a, b = _engine(tiny_qwen3, shared, **declared), _engine(tiny_qwen3, shared, **declared)
    alice = SYSTEM + tuple(range(400, 421))
    a.generate_sync(GenerateRequest("a1", alice, SAMPLING, "alice-1", "alice"))
    assert a.store.flush_store_writes(FLUSH_S)
    bob = SYSTEM + tuple(range(500, 521))
    usage = b.generate_sync(GenerateRequest("b1", bob, SAMPLING, "bob-1", "bob")).usage
    assert usage.store_tokens == len(SYSTEM)  # the public prefix, found on another replica
    same = b.generate_sync(GenerateRequest("b2", alice, SAMPLING, "bob-2", "bob")).usage
    assert same.store_tokens + same.device_tokens == len(SYSTEM)  # never alice's own pages
    b.check_integrity()


def test_undeclared_prefixes_never_cross_tenants_through_the_store(
    tiny_qwen3, shared: StoreLocation
) -> None:
    a, b = _engine(tiny_qwen3, shared), _engine(tiny_qwen3, shared)
    prompt = SYSTEM + tuple(range(400, 421))
    a.generate_sync(GenerateRequest("a1", prompt, SAMPLING, "s", "alice"))
    assert a.store.flush_store_writes(FLUSH_S)
    usage = b.generate_sync(GenerateRequest("b1", prompt, SAMPLING, "s", "bob")).usage
    assert usage.store_tokens == 0 and usage.recomputed_tokens == 0


def test_pages_past_the_write_behind_bound_wait_and_a_drain_writes_them(
    tiny_qwen3, tmp_path: Path
) -> None:
    probe = _engine(tiny_qwen3, None)
    page_bytes = probe._device_pool.bytes_per_page
    a = _engine(tiny_qwen3, StoreLocation(str(tmp_path)), write_behind_bytes=3 * page_bytes)
    a.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
    assert a.store.flush_store_writes(FLUSH_S)
    assert a._handover is not None and a._handover.deferred_pages > 0
    assert a._store is not None and a._store.stats().puts >= 1
    assert (
        a.store.drain_to_store().pages == a._handover.deferred_pages
    )  # nothing was lost, only deferred
    b = _engine(tiny_qwen3, StoreLocation(str(tmp_path)))
    prompt2 = TURN1 + (1, 2, 3) + TURN2_NEW
    usage = b.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent")).usage
    assert usage.store_tokens >= 40


def test_a_turn_served_elsewhere_before_the_pages_land_counts_them_recomputed(
    tiny_qwen3, tmp_path: Path
) -> None:
    """The turn's last output waits for the session's record (not its pages): the next
    turn, on another replica while the pages are still being written, knows the history
    was the fleet's and counts its rebuild as recomputed, not new."""
    import asyncio
    import threading

    from penelope_engine.async_engine import AsyncEngine

    shared = StoreLocation(str(tmp_path / "shared"))
    config = CacheConfig(PS, 64, 32, "penelope", store_uri=shared.uri)
    a = AsyncEngine(EngineConfig(cache=config), loaded=tiny_qwen3)
    b = _engine(tiny_qwen3, shared)
    release = threading.Event()
    assert a.engine._store is not None
    store_put = a.engine._store.put

    def slow_put(segment):  # the page upload takes until the next turn has run
        release.wait(30.0)
        return store_put(segment)

    a.engine._store.put = slow_put  # type: ignore[method-assign]

    async def first_turn() -> tuple[int, ...]:
        req = GenerateRequest("t1", TURN1, SAMPLING, "agent")
        outs = [o async for o in a.generate(req)]
        return tuple(t for o in outs for t in o.token_ids)

    try:
        one = asyncio.run(first_turn())
        queued = a.engine.stats()  # what a replica dying now would lose, on /metrics
        assert queued.write_behind_pages >= 40 // PS and queued.store_written_pages == 0
        prompt2 = TURN1 + one + TURN2_NEW
        two = b.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent"))
    finally:
        release.set()
        assert a.engine.store.flush_store_writes(FLUSH_S)
        after = a.engine.stats()
        asyncio.run(a.shutdown())
    assert after.write_behind_pages == 0 and after.store_written_pages >= 40 // PS
    assert two.usage.store_tokens == 0  # no page had landed
    assert two.usage.recomputed_tokens >= 40  # but the history was the fleet's
    assert two.usage.new_tokens <= len(TURN2_NEW) + PS


def test_the_last_record_written_names_what_a_slow_write_behind_stored(
    tiny_qwen3, tmp_path: Path
) -> None:
    """Turn 2's record is written while turn 1's pages are still uploading; when they
    land, the record written then lists them and every page turn 2 saw, so a replica
    that takes the session before turn 2's pages land (its replica died) still loads
    turn 1's."""
    import threading
    import time

    shared = StoreLocation(str(tmp_path / "shared"))
    a, b = _engine(tiny_qwen3, shared), _engine(tiny_qwen3, shared)
    assert a._handover is not None and a._handover.writer is not None and b._store is not None
    gates = [threading.Event(), threading.Event()]  # turn 1's upload job, turn 2's
    submit = a._handover.writer.submit

    def gated_submit(nbytes, job):
        gate = gates[min(len(jobs), 1)]
        jobs.append(gate)
        return submit(nbytes, lambda: (gate.wait(120.0), job()))

    jobs: list[threading.Event] = []
    a._handover.writer.submit = gated_submit  # type: ignore[method-assign]

    def record_when(done) -> object:
        deadline = time.monotonic() + 10  # the gates hold for longer
        while not done(r := b._store.get_record("default", "agent")):
            assert time.monotonic() < deadline, r
            time.sleep(0.02)
        return r

    try:
        one = a.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
        prompt2 = TURN1 + one.token_ids + TURN2_NEW
        a.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent"))
        seen = a.inspect().core.sessions.get("agent")
        assert seen is not None and len(jobs) == 2
        record_when(lambda r: r is not None and len(r.page_hashes) == len(seen.seen_hashes))
        gates[0].set()  # turn 1's pages land; turn 2's never do (its replica dies)
        record = record_when(lambda r: r is not None and r.segments)
        assert len(record.page_hashes) == len(seen.seen_hashes)  # turn 2's pages, seen
    finally:
        gates[1].set()
        assert a.store.flush_store_writes(FLUSH_S)


def test_a_page_read_that_overran_does_not_cost_the_next_session_its_record(
    tiny_qwen3, tmp_path: Path
) -> None:
    """After a page read passes its budget, page reads are skipped for a cool-down; an
    arriving session's record is read on readers of its own, with its own budget, so a
    moved session still finds its history (recomputed or loaded, never counted new)."""
    import time

    shared = StoreLocation(str(tmp_path / "shared"))
    a, b = _engine(tiny_qwen3, shared), _engine(tiny_qwen3, shared)
    one = a.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
    assert a.store.flush_store_writes(FLUSH_S)
    pages = b.inspect().core.tiers.read_budget
    assert pages is not None
    assert pages.call(lambda: time.sleep(pages.budget_s * 3), None) is None  # an overrun
    assert pages.call(lambda: 1, None) is None  # page reads now cool down: skipped
    prompt2 = TURN1 + one.token_ids + TURN2_NEW
    two = b.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent"))
    assert two.usage.store_tokens + two.usage.recomputed_tokens >= 40  # the fleet's history
    assert two.usage.new_tokens <= len(TURN2_NEW) + PS
    assert b.stats().store_read_timeouts >= 2  # the overrun and the skipped read, reported


def test_a_record_write_stuck_in_the_store_holds_up_no_page_write(
    tiny_qwen3, tmp_path: Path
) -> None:
    """The turn's first record hangs in a slow store (its own queue's thread). The page
    writer writes the session's pages meanwhile and, finding that record being written,
    leaves its record to that thread instead of waiting for it: its queue empties while
    the record is still stuck. When the stuck write ends, the record is written once
    more, naming the segments that landed meanwhile."""
    import threading

    shared = StoreLocation(str(tmp_path / "shared"))
    a, b = _engine(tiny_qwen3, shared), _engine(tiny_qwen3, shared)
    assert a._store is not None and b._store is not None and a._handover is not None
    assert a._handover.writer is not None
    release, calls = threading.Event(), []
    put_record = a._store.put_record

    def stuck_put_record(tenant, name, pages):
        calls.append(name)
        if len(calls) == 1:
            release.wait(60.0)  # the first record's store call, until the pages are written
        return put_record(tenant, name, pages)

    a._store.put_record = stuck_put_record  # type: ignore[method-assign]
    try:
        a.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
        assert a._handover.writer.flush(FLUSH_S)  # the pages: not behind the stuck record
        assert a.stats().store_written_pages >= 40 // PS
        assert calls == ["agent"] and not release.is_set()
    finally:
        release.set()
    assert a.store.flush_store_writes(FLUSH_S)
    assert calls == ["agent", "agent"]  # written once more when the stuck write ended
    record = b._store.get_record("default", "agent")
    seen = a.inspect().core.sessions.get("agent")
    assert record is not None and seen is not None and record.segments
    assert len(record.page_hashes) == len(seen.seen_hashes)
