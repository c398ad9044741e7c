"""Prometheus metrics, the same names in standalone and Ray mode.

Engine counters and gauges are read from each replica's `EngineStats` at
scrape time (a custom collector); latencies are observed by the API as the
client sees them. Every series carries a `replica` label. The engine's series
are derived from `EngineStats`' field metadata (`penelope_engine.stats.metric`:
name, kind, help, labels), so a new engine metric is a new field there.

| metric                                    | kind      | labels                  |
|-------------------------------------------|-----------|-------------------------|
| penelope_tokens_total                     | counter   | replica, source         |
| penelope_miss_tokens_total                | counter   | replica, cause          |
| penelope_cache_hit_ratio                  | gauge     | replica                 |
| penelope_recompute_ratio                  | gauge     | replica                 |
| penelope_pages / penelope_pages_capacity  | gauge     | replica, tier           |
| penelope_evictions_total                  | counter   | replica, policy, reason |
| penelope_queue_length / _running_requests | gauge     | replica                 |
| penelope_ttft_seconds / penelope_itl_seconds | histogram | replica              |
| penelope_requests_total                   | counter   | route, status           |
| penelope_request_timeouts_total           | counter   |                         |
| penelope_store_operations_total           | counter   | replica, op             |
| penelope_store_errors_total               | counter   | replica, kind           |
| penelope_store_used_bytes                 | gauge     | replica                 |
| penelope_store_budget_bytes               | gauge     | replica                 |
| penelope_store_degraded                   | gauge     | replica                 |
| penelope_write_behind_queue_bytes / _queue_jobs / _cap_bytes | gauge | replica  |
| penelope_write_behind_refused_total / _deferred_pages_total | counter | replica |
| penelope_store_lost_pages_total / penelope_store_read_timeouts_total | counter | replica |
| penelope_store_written_pages_total | counter | replica |
| penelope_write_behind_queue_pages | gauge | replica |

The store series exist for replicas with an Arrow store (in Ray mode from
each replica's reports and routing stats, `deployments.ray.replica_stats`):
`op` is put, hit or miss; `kind` is write (unwritable or full), read (I/O),
corrupt (quarantined), missing (file gone) or rejected (larger than the
budget). A store error is never a request error: the pages are recomputed.
The store-fault series (degraded, write-behind queue, lost pages, reads past
their budget) come from `EngineStats`, so they exist in Ray mode too.

`source` is where a prompt token's KV came from: device, host, store,
recomputed (it was cached, then evicted) or new. The two ratios are
cumulative since the replica started; the Grafana dashboard computes them
over time windows from `penelope_tokens_total`. `cause` is why a computed
prompt token was not a cache hit (the miss ledger, `penelope_engine.sched.ledger`):
new, evicted_device, dropped_host, store_miss, recompute_cheaper,
moved_replica, prompt_edit or tenant; per replica the causes sum to the
recomputed and new tokens.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cache_store import StoreStats
from penelope_engine.protocol import EngineStats
from penelope_engine.stats import Series

StatsSource = Callable[[], Mapping[str, EngineStats]]
StoreSource = Callable[[], Mapping[str, StoreStats]]

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class _Sample:
    """One sample source of a family: how to read it from a replica's `EngineStats`."""

    read: Callable[[EngineStats], Any]
    series: Series


def _samples(cls: type, read: Callable[[Any], Any] = lambda s: s) -> Iterator[_Sample]:
    """Every exported field of the stats dataclass `cls` (walking into nested ones without
    metadata), then its `DERIVED` properties, in declaration order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        get = functools.partial(_read_field, read, f.name)
        series = f.metadata.get("series")
        if series is not None:
            yield _Sample(get, series)
        elif dataclasses.is_dataclass(hints[f.name]):
            yield from _samples(hints[f.name], get)
    for name, series in getattr(cls, "DERIVED", ()):
        yield _Sample(functools.partial(_read_field, read, name), series)


def _read_field(read: Callable[[Any], Any], name: str, stats: EngineStats) -> Any:
    return getattr(read(stats), name)


def _families() -> dict[str, list[_Sample]]:
    """The engine's metric families, named and ordered by `EngineStats`' field metadata."""
    families: dict[str, list[_Sample]] = {}
    for sample in _samples(EngineStats):
        families.setdefault(sample.series.name, []).append(sample)
    return families


ENGINE_FAMILIES = _families()


def _family(samples: list[_Sample], by_replica: Mapping[str, EngineStats]) -> Metric:
    first = samples[0].series
    kind = GaugeMetricFamily if first.kind == "gauge" else CounterMetricFamily
    family = kind(first.name, first.help, labels=["replica", *first.label_names])
    for replica, s in sorted(by_replica.items()):
        for sample in samples:
            value, series = sample.read(s), sample.series
            if series.each is not None:
                for f in dataclasses.fields(value):
                    family.add_metric([replica, f.name], getattr(value, f.name))
            elif series.rows:
                for row in value:
                    family.add_metric([replica, *row[:-1]], row[-1])
            else:
                family.add_metric([replica, *(v for _, v in series.labels)], value)
    return family


class EngineStatsCollector(Collector):
    """Turns the latest `EngineStats` of every replica into metric families."""

    def __init__(self, source: StatsSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        by_replica = dict(self._source())
        for samples in ENGINE_FAMILIES.values():
            yield _family(samples, by_replica)


class StoreStatsCollector(Collector):
    """The Arrow store's counters of every replica that has one."""

    def __init__(self, source: StoreSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        ops = CounterMetricFamily(
            "penelope_store_operations", "Arrow store operations.", labels=["replica", "op"]
        )
        errors = CounterMetricFamily(
            "penelope_store_errors",
            "Arrow store failures (each one recomputes instead of loading or spilling).",
            labels=["replica", "kind"],
        )
        used = GaugeMetricFamily(
            "penelope_store_used_bytes", "Bytes the Arrow store holds.", labels=["replica"]
        )
        budget = GaugeMetricFamily(
            "penelope_store_budget_bytes",
            "Bytes the Arrow store may hold (less than configured once its volume was full).",
            labels=["replica"],
        )
        for replica, s in sorted(self._source().items()):
            for op, n in (
                ("put", s.puts), ("hit", s.hits), ("miss", s.misses),
                ("record_write", s.records_written), ("record_read", s.records_read),
                ("record_swept", s.records_swept),
            ):  # fmt: skip
                ops.add_metric([replica, op], n)
            kinds = {
                "write": s.write_errors,
                "read": s.read_errors,
                "corrupt": s.corrupt,
                "missing": s.missing,
                "rejected": s.rejected,
            }
            for kind, n in kinds.items():
                errors.add_metric([replica, kind], n)
            used.add_metric([replica], s.used_bytes)
            budget.add_metric([replica], s.budget_bytes)
        yield from (ops, errors, used, budget)


class ApiMetrics:
    """The app's own registry (not the global one, so apps never collide)."""

    def __init__(self, source: StatsSource, store_source: StoreSource = dict) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.ttft = Histogram(
            "penelope_ttft_seconds",
            "Time from request arrival to its first token.",
            ["replica"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "penelope_itl_seconds",
            "Time between consecutive output steps of a request.",
            ["replica"],
            buckets=ITL_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "penelope_requests",
            "Completed HTTP API requests.",
            ["route", "status"],
            registry=self.registry,
        )
        self.timeouts = Counter(
            "penelope_request_timeouts",
            "Requests aborted because they outlived api.request_timeout_s.",
            registry=self.registry,
        )
        self.stalled_streams = Counter(
            "penelope_stalled_streams",
            "Streams aborted because their client read nothing for api.stream_stall_timeout_s.",
            registry=self.registry,
        )
        self.pending = Gauge(
            "penelope_api_pending_requests",
            "Admitted, unfinished requests in this API process.",
            registry=self.registry,
        )
        self.registry.register(EngineStatsCollector(source))
        self.registry.register(StoreStatsCollector(store_source))

    def render(self) -> bytes:
        return generate_latest(self.registry)
