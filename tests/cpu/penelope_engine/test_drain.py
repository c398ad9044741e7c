"""A leaving replica's drain: nothing it holds is lost, and nothing newer is overwritten.

Engines on one store stand for replicas; every one starts before anything is
written, so what it finds it finds through the records, not a startup scan.
"""

from __future__ import annotations

from pathlib import Path

from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.protocol import (
    UNDRAINED_NO_STORE,
    UNDRAINED_PAGES_LATE,
    UNDRAINED_PAGES_LOST,
    UNDRAINED_PAGES_REFUSED,
    GenerateRequest,
    SamplingParams,
)

PS = 4
SAMPLING = SamplingParams(max_tokens=3, ignore_eos=True)
TURN1 = tuple(range(300, 341))
FLUSH_S = 30.0


def _engine(tiny_qwen3, where: Path, **cache: object) -> Engine:
    config = CacheConfig(PS, 64, 32, "penelope", store_uri=str(where), **cache)  # type: ignore[arg-type]
    return Engine(EngineConfig(cache=config), loaded=tiny_qwen3)


def _turn(engine: Engine, rid: str, prompt: tuple[int, ...]):
    out = engine.generate_sync(GenerateRequest(rid, prompt, SAMPLING, "agent"))
    assert engine.store.flush_store_writes(FLUSH_S)
    return out


def test_a_drain_leaves_the_longer_record_of_a_session_that_moved_on(
    tiny_qwen3, tmp_path: Path
) -> None:
    a, b, c = (_engine(tiny_qwen3, tmp_path) for _ in range(3))
    one = _turn(a, "t1", TURN1)
    prompt2 = TURN1 + one.token_ids + tuple(range(700, 720))
    two = _turn(b, "t2", prompt2)  # the session moved to b, which records its longer path
    assert (
        a.store.drain_to_store().pages == 0
    )  # a leaves: its pages of the session were written behind
    assert a._handover is not None and a._handover.last_drain is not None
    assert a._handover.last_drain.records == 0  # its record of the session is b's now
    prompt3 = prompt2 + two.token_ids + tuple(range(800, 809))
    usage = c.generate_sync(GenerateRequest("t3", prompt3, SAMPLING, "agent")).usage
    assert usage.store_tokens >= len(prompt2) // PS * PS  # b's history, not a's shorter one
    assert usage.recomputed_tokens == 0


def test_pages_written_by_a_drain_are_named_in_the_record_a_running_replica_reads(
    tiny_qwen3, tmp_path: Path
) -> None:
    page_bytes = _engine(tiny_qwen3, tmp_path)._device_pool.bytes_per_page
    a = _engine(tiny_qwen3, tmp_path, write_behind_bytes=3 * page_bytes)
    b = _engine(tiny_qwen3, tmp_path)  # up before a writes: only the record names the pages
    _turn(a, "t1", TURN1)
    assert a._handover is not None and a._handover.deferred_pages > 0
    assert a.store.drain_to_store().pages == a._handover.deferred_pages
    assert a._handover.last_drain is not None and a._handover.last_drain.records == 1
    assert a._handover.last_drain.in_time
    usage = b.generate_sync(GenerateRequest("t2", TURN1 + (1, 2, 3, 4), SAMPLING, "agent")).usage
    assert usage.store_tokens == len(TURN1) // PS * PS and usage.recomputed_tokens == 0


def test_a_next_turn_that_rewrites_its_history_finds_only_what_it_shares(
    tiny_qwen3, tmp_path: Path
) -> None:
    """What `bench cluster` saw on a downscale (one of its trace's sessions rewrites
    its context between turns): the store holds the old history, complete, and the
    new prompt shares only its first pages with it; the rest is new, not recomputed."""
    a, b = _engine(tiny_qwen3, tmp_path), _engine(tiny_qwen3, tmp_path)
    _turn(a, "t1", TURN1)
    a.store.drain_to_store()
    assert a.store.close(FLUSH_S)
    rewritten = TURN1[:18] + tuple(range(900, 930))  # shares 4 full pages and 2 tokens
    usage = b.generate_sync(GenerateRequest("t2", rewritten, SAMPLING, "agent")).usage
    assert usage.store_tokens == 16
    assert usage.recomputed_tokens == 0 and usage.new_tokens == len(rewritten) - 16


def test_a_drain_that_wrote_everything_names_no_session(tiny_qwen3, tmp_path: Path) -> None:
    a = _engine(tiny_qwen3, tmp_path)
    _turn(a, "t1", TURN1)
    report = a.store.drain_to_store()
    assert report.undrained == () and report.in_time


def test_a_drain_names_each_session_it_could_not_leave_whole_and_why(
    tiny_qwen3, tmp_path: Path
) -> None:
    """A downscale must drain every session or say which it could not: with no store,
    past its deadline, a store that refuses the drain's pages, and pages written behind
    that the store refused at a turn end (marked stored when copied: only named)."""
    none = Engine(EngineConfig(cache=CacheConfig(PS, 64, 32, "penelope")), loaded=tiny_qwen3)
    none.generate_sync(GenerateRequest("t0", TURN1, SAMPLING, "agent"))
    assert none.store.drain_to_store().undrained == (("agent", UNDRAINED_NO_STORE),)

    page_bytes = _engine(tiny_qwen3, tmp_path / "probe")._device_pool.bytes_per_page
    late = _engine(tiny_qwen3, tmp_path / "late", write_behind_bytes=3 * page_bytes)
    _turn(late, "t1", TURN1)  # most pages deferred: the drain must write them
    report = late.store.drain_to_store(0.0)
    assert report.undrained == (("agent", UNDRAINED_PAGES_LATE),) and not report.in_time

    refusing = _engine(tiny_qwen3, tmp_path / "refusing", write_behind_bytes=3 * page_bytes)
    _turn(refusing, "t1", TURN1)
    assert refusing._store is not None
    refusing._store.put = lambda seg: False  # type: ignore[method-assign]  # full, say
    report = refusing.store.drain_to_store()
    assert report.undrained == (("agent", UNDRAINED_PAGES_REFUSED),) and report.pages == 0

    full = _engine(tiny_qwen3, tmp_path / "full", store_bytes=page_bytes // 2)  # no segment fits
    _turn(full, "t1", TURN1)
    assert full.stats().store_lost_pages > 0
    assert full.store.drain_to_store().undrained == (("agent", UNDRAINED_PAGES_LOST),)
    for engine in (none, late, refusing, full):
        engine.check_integrity()
