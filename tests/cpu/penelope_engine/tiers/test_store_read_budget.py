"""A slow store never stalls a request past `store_read_budget_s`: its pages recompute
(`store_miss`), and the answer is the one a healthy store gives."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from bench.cluster.s3 import CREDENTIALS, new_bucket
from bench.faults.proxy import Fault, FaultProxy
from bench.faults.s3 import RestartableS3
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.tiers.budget import ReadBudget

S3_PORT, PROXY_PORT = 18303, 18304
SAMPLING = SamplingParams(max_tokens=3, ignore_eos=True)
TURN1 = tuple(range(300, 341))
TURN2_NEW = tuple(range(700, 709))
BUDGET_S = 0.3


@pytest.fixture
def proxied_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FaultProxy, CacheConfig]]:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with RestartableS3(S3_PORT) as s3, FaultProxy(("127.0.0.1", S3_PORT), PROXY_PORT) as proxy:
        bucket = new_bucket(s3.endpoint)
        cache = CacheConfig(
            4, 64, 0, "penelope", store_uri=bucket.uri, store_endpoint=proxy.endpoint,
            store_region=bucket.region, write_behind_bytes=0, store_read_budget_s=BUDGET_S,
            store_record_budget_s=BUDGET_S, store_request_timeout_s=5.0,
        )  # fmt: skip
        yield proxy, cache


def test_a_slow_store_read_is_cut_at_the_budget_and_recomputed(tiny_qwen3, proxied_store) -> None:
    proxy, cache = proxied_store
    plain = Engine(EngineConfig(cache=CacheConfig(4, 64, 0, "penelope")), loaded=tiny_qwen3)
    ref1 = plain.generate_sync(GenerateRequest("r1", TURN1, SAMPLING, "agent"))
    prompt2 = TURN1 + ref1.token_ids + TURN2_NEW
    ref2 = plain.generate_sync(GenerateRequest("r2", prompt2, SAMPLING, "agent"))

    leaving = Engine(EngineConfig(cache=cache), loaded=tiny_qwen3)
    first = leaving.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
    assert leaving.store.drain_to_store().pages > 0
    arriving = Engine(EngineConfig(cache=cache), loaded=tiny_qwen3)  # indexes the store
    proxy.set(Fault(delay_s=2.0))  # every store call now takes 2 s
    t0 = time.monotonic()
    second = arriving.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent"))
    took = time.monotonic() - t0
    assert first.token_ids == ref1.token_ids and second.token_ids == ref2.token_ids
    assert took < 2 * BUDGET_S + 1.0  # the record read and the page read, each cut at its own
    assert second.usage.store_tokens == 0
    stats = arriving.stats()
    assert stats.tokens.misses.store_miss >= 40  # the ledger names why the history recomputed
    assert stats.store_read_timeouts >= 1
    arriving.check_integrity()


def test_a_budget_skips_reads_when_every_reader_is_stalled() -> None:
    budget = ReadBudget(0.05, threads=1)
    stalled = budget.call(lambda: time.sleep(0.5) or "late", "missed")
    assert stalled == "missed" and budget.timeouts == 1
    t0 = time.monotonic()
    assert budget.call(lambda: "never run", "missed") == "missed"  # its thread is still busy
    assert time.monotonic() - t0 < 0.04 and budget.skipped == 1
    time.sleep(0.5)
    assert budget.call(lambda: "fresh", "missed") == "fresh"
    budget.close()


def test_after_an_overrun_reads_cool_down_doubling_until_one_answers_in_time() -> None:
    """A slow store costs one budget per cool-down, not one per read: after an overrun,
    reads are misses at once for 2 budgets, then 4 after the next overrun in a row; a read
    that answers within its budget ends it."""
    budget = ReadBudget(0.2, threads=4)  # threads to spare: only the cool-down skips
    ran: list[str] = []

    def slow() -> str:
        ran.append("slow")
        time.sleep(0.6)
        return "late"

    assert budget.call(slow, "missed") == "missed"  # overrun 1: cool-down 0.4 s
    t0 = time.monotonic()
    assert budget.call(lambda: ran.append("skipped") or "x", "missed") == "missed"
    assert time.monotonic() - t0 < 0.1 and budget.skipped == 1 and "skipped" not in ran
    time.sleep(0.5)
    assert budget.call(slow, "missed") == "missed"  # overrun 2 in a row: cool-down 0.8 s
    time.sleep(0.5)
    assert budget.call(lambda: "fast", "missed") == "missed" and budget.skipped == 2
    time.sleep(0.5)
    assert budget.call(lambda: "fast", "missed") == "fast"  # in time: the cool-down ends
    assert budget.call(lambda: "again", "missed") == "again"
    assert budget.timeouts == 2 and ran == ["slow", "slow"]
    budget.close()


def test_a_budget_without_cool_down_reads_the_next_session_after_an_overrun() -> None:
    """Path records (read when a session arrives, off the step thread) have no cool-down:
    one overrun costs its own session, and the next arriving session's read runs."""
    budget = ReadBudget(0.1, threads=2, cool_down=False)
    assert budget.call(lambda: time.sleep(0.4) or "late", "missed") == "missed"
    assert budget.call(lambda: "next session's record", "missed") == "next session's record"
    assert budget.timeouts == 1 and budget.skipped == 0
    budget.close()


def test_reads_past_the_busy_threads_wait_their_turn_within_their_budget() -> None:
    """Four sessions come back at once (their replica died) to a store that answers in
    0.2 s, with two reader threads: every record is read, none is a miss."""
    import threading

    budget = ReadBudget(1.5, threads=2, cool_down=False)
    got: list[str] = []

    def arrive(i: int) -> None:
        got.append(budget.call(lambda: time.sleep(0.2) or f"record {i}", "missed"))

    arrivals = [threading.Thread(target=arrive, args=(i,)) for i in range(4)]
    for t in arrivals:
        t.start()
    for t in arrivals:
        t.join()
    assert sorted(got) == [f"record {i}" for i in range(4)]
    assert budget.timeouts == 0 and budget.skipped == 0
    budget.close()


def test_a_read_whose_budget_ends_in_the_queue_never_runs() -> None:
    budget = ReadBudget(0.1, threads=1, cool_down=False)
    ran: list[str] = []
    release = threading.Event()
    holder = threading.Thread(target=budget.call, args=(lambda: release.wait(5.0), None))
    holder.start()
    time.sleep(0.02)  # the one thread is taken, within its budget: not stalled
    assert budget.call(lambda: ran.append("queued") or "late", "missed") == "missed"
    release.set()
    holder.join()
    time.sleep(0.1)
    assert ran == [] and budget.timeouts == 2  # the holder overran too
    budget.close()
