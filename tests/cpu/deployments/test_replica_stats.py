"""The ingress's book of live replicas: on /metrics from the first report, off when gone."""

from __future__ import annotations

import pytest

from deployments.ray.replica_stats import ReplicaStatsBook
from penelope_engine.protocol import EngineStats, MissTokens


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


def test_every_ingress_exports_every_replica_from_the_routing_stats() -> None:
    from deployments.ray.replica_stats import STATS_KEY, merged, stats_to_wire

    reported = {"r1": EngineStats(tokens_new=10)}  # the reports that reached this ingress
    routed = {
        "r1": {STATS_KEY: stats_to_wire(EngineStats(tokens_new=4))},  # older than the report
        "r2": {STATS_KEY: stats_to_wire(EngineStats(tokens_device=7, evictions=(("a", "b", 2),)))},
        "r3": {},  # no routing stats yet
        "r4": {STATS_KEY: {"tokens_new": "many"}},  # malformed: ignored
        "r5": {STATS_KEY: {"tokens_new": 1, "bogus": 1}},
        "r6": {STATS_KEY: [1, 2]},
    }
    out = merged(reported, routed)
    assert set(out) == {"r1", "r2"}
    assert out["r1"].tokens_new == 10  # cumulative counters never go back
    assert out["r2"].tokens_device == 7 and out["r2"].evictions == (("a", "b", 2),)
    fresher = {"r1": {STATS_KEY: stats_to_wire(EngineStats(tokens_new=12))}}
    assert merged(reported, fresher)["r1"].tokens_new == 12


def test_the_miss_ledger_travels_in_the_routing_stats() -> None:
    from deployments.ray.replica_stats import STATS_KEY, merged, stats_from_wire, stats_to_wire

    stats = EngineStats(tokens_new=9, misses=MissTokens(new=5, prompt_edit=4))
    assert stats_from_wire(stats_to_wire(stats)) == stats
    wire = stats_to_wire(stats)
    bad = {**wire, "misses": {**wire["misses"], "new": "five"}}
    assert merged({}, {"r1": {STATS_KEY: bad}}) == {}
    assert stats_from_wire({**wire, "misses": {"bogus": 1}}) is None
