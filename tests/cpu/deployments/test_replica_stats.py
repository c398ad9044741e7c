"""The ingress's book of live replicas: on /metrics from the first report, off when gone."""

from __future__ import annotations

import dataclasses

import pytest

from cache_store import StoreStats
from deployments.ray.replica_stats import (
    STORE_KEY,
    ReplicaStatsBook,
    store_from_wire,
    stores_merged,
)
from penelope_engine.protocol import EngineStats, MissTokens, TokenUsage


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

    def new(n: int) -> EngineStats:
        return EngineStats(tokens=TokenUsage(new_tokens=n))

    reported = {"r1": new(10)}  # the reports that reached this ingress
    r2 = EngineStats(tokens=TokenUsage(device_tokens=7), evictions=(("a", "b", 2),))
    routed = {
        "r1": {STATS_KEY: stats_to_wire(new(4))},  # older than the report
        "r2": {STATS_KEY: stats_to_wire(r2)},
        "r3": {},  # no routing stats yet
        "r4": {STATS_KEY: {"tokens": {"new_tokens": "many"}}},  # malformed: ignored
        "r5": {STATS_KEY: {"tokens": {"new_tokens": 1}, "bogus": 1}},
        "r6": {STATS_KEY: [1, 2]},
    }
    out = merged(reported, routed)
    assert set(out) == {"r1", "r2"}
    assert out["r1"].tokens.new_tokens == 10  # cumulative counters never go back
    assert out["r2"].tokens.device_tokens == 7 and out["r2"].evictions == (("a", "b", 2),)
    fresher = {"r1": {STATS_KEY: stats_to_wire(new(12))}}
    assert merged(reported, fresher)["r1"].tokens.new_tokens == 12


def test_the_miss_ledger_travels_in_the_routing_stats() -> None:
    from deployments.ray.replica_stats import STATS_KEY, merged, stats_from_wire, stats_to_wire

    stats = EngineStats(tokens=TokenUsage(new_tokens=9, misses=MissTokens(new=5, prompt_edit=4)))
    assert stats_from_wire(stats_to_wire(stats)) == stats
    wire = stats_to_wire(stats)
    tokens = wire["tokens"]
    bad = {**wire, "tokens": {**tokens, "misses": {**tokens["misses"], "new": "five"}}}
    assert merged({}, {"r1": {STATS_KEY: bad}}) == {}
    assert stats_from_wire({**wire, "tokens": {**tokens, "misses": {"bogus": 1}}}) is None


def test_every_stats_field_round_trips_through_the_typed_wire_form() -> None:
    """Each field of `EngineStats` (and of its nested `TokenUsage` and `MissTokens`) decodes
    by its declared type: a new field of any scalar type travels without a change here,
    and a mistyped one is refused."""
    import dataclasses
    import json
    import typing

    from deployments.ray.replica_stats import stats_from_wire, stats_to_wire

    samples = {int: 7, float: 2.5, str: "x", bool: True}
    values: dict[str, object] = {}
    for f in dataclasses.fields(EngineStats):
        declared = typing.get_type_hints(EngineStats)[f.name]
        if declared in samples:
            values[f.name] = samples[declared]
    tokens = TokenUsage(prompt_tokens=4, device_tokens=1, misses=MissTokens(new=2, tenant=1))
    stats = EngineStats(
        **values,  # type: ignore[arg-type]
        tokens=tokens,
        evictions=(("lru", "drop", 3),),
    )
    wire = json.loads(json.dumps(stats_to_wire(stats)))  # as JSON carries it
    assert stats_from_wire(wire) == stats
    for name, value in values.items():
        assert stats_from_wire({**wire, name: [value]}) is None, name  # mistyped: refused
    assert stats_from_wire({**wire, "unknown_field": 1}) is None
    assert stats_from_wire({**wire, "tokens": {**wire["tokens"], "device_tokens": 1.5}}) is None
    assert stats_from_wire({**wire, "evictions": [["lru", "drop"]]}) is None


def test_a_float_field_decodes_where_json_dropped_its_fraction() -> None:
    """A float-typed field arriving as an int (JSON writes 3.0 as 3) is accepted."""
    from deployments.ray import replica_stats

    assert replica_stats._decode(3, float) == 3.0 and replica_stats._decode(3.5, float) == 3.5
    for value, declared in ((True, int), ("3", float)):
        with pytest.raises(ValueError):
            replica_stats._decode(value, declared)


def _store(puts: int) -> StoreStats:
    return StoreStats(
        puts=puts, hits=0, misses=0, corrupt=0, missing=0, read_errors=0, evictions=0,
        write_errors=0, rejected=0, bytes_written=0, bytes_read=0, records_written=0,
        records_read=0, records_swept=0, segments=0, used_bytes=0, budget_bytes=1,
    )  # fmt: skip


def test_store_counters_follow_their_replica_and_outlive_a_report_without_them() -> None:
    """A replica's periodic report carries its store's counters; a request's last output
    does not (the last reported stand); goodbye or the TTL drops them with the replica."""
    clock = Clock()
    book = ReplicaStatsBook(ttl_s=8.0, clock=clock)
    book.report("r1", EngineStats(), _store(3))
    book.report("r2", EngineStats())  # no store
    book.report("r1", EngineStats(queue_length=1))  # a request's last output
    assert {r: s.puts for r, s in book.live_stores().items()} == {"r1": 3}
    book.report("r1", None)
    assert book.live_stores() == {}
    book.report("r3", EngineStats(), _store(1))
    clock.now += 9.0
    assert book.live_stores() == {}


def test_store_counters_cross_the_routing_stats_whole_or_not_at_all() -> None:
    wire = dataclasses.asdict(_store(7))
    assert store_from_wire(wire) == _store(7)
    assert store_from_wire({**wire, "puts": "seven"}) is None
    assert store_from_wire({**wire, "unknown": 1}) is None
    routed = {"r1": {STORE_KEY: dataclasses.asdict(_store(9))}, "r2": {STORE_KEY: wire},
              "r3": {}}  # fmt: skip
    merged = stores_merged({"r1": _store(4)}, routed)  # reported to this ingress first
    assert {r: s.puts for r, s in merged.items()} == {"r1": 4, "r2": 7}
