"""An S3 store that is unreachable, slow or throttling: fast misses, a degraded state, recovery.

Real components only: moto's S3 server (stopped and started on the same
data) behind `bench.faults.proxy.FaultProxy`, which delays calls, answers
503 SlowDown or refuses connections.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pytest

from bench.cluster.s3 import CREDENTIALS, new_bucket
from bench.faults.proxy import Fault, FaultProxy
from bench.faults.s3 import RestartableS3
from cache_store import ArrowSegmentStore, Segment, StoreLocation
from cache_store.health import StoreTuning

NS = "model-a"
S3_PORT, PROXY_PORT = 18301, 18302  # this worktree's range
TUNING = StoreTuning(connect_timeout_s=0.5, request_timeout_s=1.0, retries=2, probe_s=0.5)


def segment(first: int, floats: int = 4096) -> Segment:
    kv = np.random.default_rng(first).standard_normal(floats).astype(np.float32)
    return Segment(NS, "t", (first,), (0,), ((first, 2, 3),), "float32", kv.shape, memoryview(kv))


@pytest.fixture(scope="module")
def s3() -> Iterator[RestartableS3]:
    with RestartableS3(S3_PORT) as server:
        yield server


@pytest.fixture
def proxy(s3: RestartableS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with FaultProxy(("127.0.0.1", S3_PORT), PROXY_PORT) as p:
        yield p


def open_store(
    proxy: FaultProxy, s3: RestartableS3, tuning: StoreTuning = TUNING
) -> ArrowSegmentStore:
    bucket = new_bucket(s3.endpoint)  # made directly; the store goes through the proxy
    where = StoreLocation(bucket.uri, endpoint=proxy.endpoint, region=bucket.region)
    return ArrowSegmentStore(where, 64 << 20, NS, tuning=tuning)


def wait_until(check: object, timeout_s: float) -> float:
    t0 = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - t0 < timeout_s, f"not within {timeout_s} s"
        time.sleep(0.05)
    return time.monotonic() - t0


def test_unreachable_store_degrades_fails_fast_and_recovers_on_the_same_data(
    proxy: FaultProxy, s3: RestartableS3, caplog: pytest.LogCaptureFixture
) -> None:
    # the probe period outlasts the failing calls below even on a loaded machine, so the
    # two calls after them meet a store still degraded (a probe due would try it again)
    tuning = StoreTuning(connect_timeout_s=0.5, request_timeout_s=1.0, probe_s=5.0)
    store = open_store(proxy, s3, tuning)
    before = segment(1)
    assert store.put(before)
    s3.stop()
    try:
        with caplog.at_level(logging.WARNING, logger="cache_store"):
            assert not store.put(segment(2))
            assert store.get(before.key) is None
        assert store.reads.degraded and store.writes.degraded
        assert len([r for r in caplog.records if "degraded" in r.getMessage()]) == 2
        t0 = time.monotonic()
        assert store.get(before.key) is None and not store.put(segment(3))
        assert time.monotonic() - t0 < 1.0  # degraded: not even tried
        assert store.stats().skipped == 2
    finally:
        s3.start()
    written = wait_until(lambda: store.put(segment(4)), 2 * tuning.probe_s)
    assert written < 10.0 and not store.writes.degraded  # writes resume within 10 s
    wait_until(lambda: store.get(before.key) is not None, 2 * tuning.probe_s)
    assert not store.degraded  # what was written before the outage is read again
    got = store.get(before.key)
    assert got is not None and bytes(got.payload) == bytes(before.payload)


def test_a_store_slower_than_its_timeout_is_a_bounded_failure(
    proxy: FaultProxy, s3: RestartableS3
) -> None:
    store = open_store(proxy, s3, StoreTuning(request_timeout_s=0.5, retries=1, probe_s=0.5))
    seg = segment(1)
    assert store.put(seg)
    proxy.set(Fault(delay_s=5.0))  # past every timeout
    t0 = time.monotonic()
    assert store.get(seg.key) is None
    assert time.monotonic() - t0 < 4.0  # two attempts of ~1 s each, never the 5 s
    assert store.reads.degraded and store.stats().read_errors == 1
    proxy.set(Fault())
    wait_until(lambda: store.get(seg.key) is not None, 5.0)
    assert not store.degraded


def test_a_slow_but_working_store_serves_correct_bytes(
    proxy: FaultProxy, s3: RestartableS3
) -> None:
    store = open_store(proxy, s3)
    seg = segment(7)
    assert store.put(seg)
    proxy.set(Fault(delay_s=0.3))  # slow, within the request timeout
    got = store.get(seg.key)
    assert got is not None and bytes(got.payload) == bytes(seg.payload)
    assert not store.degraded


def test_throttling_on_half_the_calls_is_absorbed_by_retries(
    proxy: FaultProxy, s3: RestartableS3
) -> None:
    store = open_store(proxy, s3, StoreTuning(retries=5))
    proxy.set(Fault(slowdown=0.5))
    segs = [segment(i) for i in range(1, 4)]  # each 503 retried costs ~0.5 s (AWS)
    assert all(store.put(s) for s in segs)  # the SDK retries each call (the proxy is seeded)
    for s in segs:
        got = store.get(s.key)
        assert got is not None and bytes(got.payload) == bytes(s.payload)
    stats = store.stats()
    assert proxy.counts.slowed_down > 0  # the calls answered 503 were sent again
    assert proxy.counts.forwarded + proxy.counts.slowed_down == proxy.counts.calls
    assert not stats.degraded and stats.write_errors == 0


def test_throttling_every_call_degrades_then_a_probe_recovers(
    proxy: FaultProxy, s3: RestartableS3
) -> None:
    store = open_store(proxy, s3)
    proxy.set(Fault(slowdown=1.0))
    assert not store.put(segment(1))
    assert store.writes.degraded and proxy.counts.slowed_down == TUNING.retries + 1
    calls = proxy.counts.calls
    assert not store.put(segment(2))  # within the probe interval: not sent
    assert proxy.counts.calls == calls
    proxy.set(Fault())
    assert wait_until(lambda: store.put(segment(3)), 5.0) < 10.0
    assert not store.degraded and store.stats().degraded_episodes == 1


def test_retry_backoff_is_jittered_under_a_doubling_cap() -> None:
    import random

    tuning = StoreTuning(backoff_s=0.1, backoff_max_s=0.3)
    rng = random.Random(0)
    sleeps = [[tuning.backoff(a, rng) for _ in range(200)] for a in range(4)]
    for attempt, caps in enumerate((0.1, 0.2, 0.3, 0.3)):
        assert 0 <= min(sleeps[attempt]) and max(sleeps[attempt]) <= caps
        assert max(sleeps[attempt]) > 0.8 * caps  # spread over the whole range
    assert len({round(s, 6) for s in sleeps[0]}) == 200  # no two replicas in step


@pytest.mark.parametrize(
    "field, value",
    [("request_timeout_s", 0.0), ("retries", -1), ("backoff_s", 3.0), ("probe_s", float("inf"))],
)
def test_tuning_is_validated(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        StoreTuning(**{field: value})  # type: ignore[arg-type]
