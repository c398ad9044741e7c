"""The ingress's book of live replicas: on /metrics from the first report, off when gone."""

from __future__ import annotations

import pytest

from deployments.replica_stats import ReplicaStatsBook
from penelope_engine.protocol import EngineStats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_replica_is_live_from_its_first_report_until_it_says_goodbye() -> None:
    book = ReplicaStatsBook(ttl_s=8.0, clock=Clock())
    assert book.live() == {}
    book.report("r1", EngineStats())
    book.report("r2", EngineStats(queue_length=3))
    assert set(book.live()) == {"r1", "r2"} and book.live()["r2"].queue_length == 3
    book.report("r1", None)
    assert set(book.live()) == {"r2"}


def test_a_replica_that_stops_reporting_is_dropped_after_the_ttl() -> None:
    clock = Clock()
    book = ReplicaStatsBook(ttl_s=8.0, clock=clock)
    book.report("dead", EngineStats())
    book.report("alive", EngineStats())
    clock.now += 6.0
    book.report("alive", EngineStats())
    assert set(book.live()) == {"dead", "alive"}
    clock.now += 3.0
    assert set(book.live()) == {"alive"}


def test_a_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        ReplicaStatsBook(ttl_s=0)
