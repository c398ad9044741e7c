"""Prometheus metrics, the same names in standalone and Ray mode.

Engine counters and gauges are read from each replica's `EngineStats` at
scrape time (a custom collector); latencies are observed by the API as the
client sees them. Every series carries a `replica` label.

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
| penelope_store_degraded                   | gauge     | replica                 |
| penelope_write_behind_queue_bytes / _queue_jobs / _cap_bytes | gauge | replica  |
| penelope_write_behind_refused_total / _deferred_pages_total | counter | replica |
| penelope_store_lost_pages_total / penelope_store_read_timeouts_total | counter | replica |

The store series exist for replicas with an Arrow store (standalone mode):
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

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cache_store import StoreStats
from penelope_engine.protocol import EngineStats

StatsSource = Callable[[], Mapping[str, EngineStats]]
StoreSource = Callable[[], Mapping[str, StoreStats]]

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)


def _token_sources(s: EngineStats) -> dict[str, int]:
    return {
        "device": s.tokens_device,
        "host": s.tokens_host,
        "store": s.tokens_store,
        "recomputed": s.tokens_recomputed,
        "new": s.tokens_new,
    }


class EngineStatsCollector(Collector):
    """Turns the latest `EngineStats` of every replica into metric families."""

    def __init__(self, source: StatsSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        by_replica = dict(self._source())
        tokens = CounterMetricFamily(
            "penelope_tokens",
            "Prompt tokens by where their KV came from.",
            labels=["replica", "source"],
        )
        hit = GaugeMetricFamily(
            "penelope_cache_hit_ratio",
            "Cached prompt tokens / prompt tokens, since start.",
            labels=["replica"],
        )
        recompute = GaugeMetricFamily(
            "penelope_recompute_ratio",
            "Recomputed (evicted) prompt tokens / prompt tokens.",
            labels=["replica"],
        )
        misses = CounterMetricFamily(
            "penelope_miss_tokens",
            "Computed prompt tokens by why they were not cache hits.",
            labels=["replica", "cause"],
        )
        for replica, s in sorted(by_replica.items()):
            for source, n in _token_sources(s).items():
                tokens.add_metric([replica, source], n)
            for cause, n in s.misses.as_dict().items():
                misses.add_metric([replica, cause], n)
            hit.add_metric([replica], s.hit_ratio)
            recompute.add_metric([replica], s.recompute_ratio)
        yield from (tokens, misses, hit, recompute)
        yield from _page_families(by_replica)
        yield from _load_families(by_replica)
        yield from _store_fault_families(by_replica)


def _page_families(by_replica: Mapping[str, EngineStats]) -> Iterator[Metric]:
    used = GaugeMetricFamily("penelope_pages", "KV pages in use.", labels=["replica", "tier"])
    total = GaugeMetricFamily(
        "penelope_pages_capacity", "KV pages a tier can hold.", labels=["replica", "tier"]
    )
    evictions = CounterMetricFamily(
        "penelope_evictions", "Evicted KV pages.", labels=["replica", "policy", "reason"]
    )
    for replica, s in sorted(by_replica.items()):
        used.add_metric([replica, "device"], s.pages_device_used)
        used.add_metric([replica, "host"], s.pages_host_used)
        total.add_metric([replica, "device"], s.pages_device_total)
        total.add_metric([replica, "host"], s.pages_host_total)
        for policy, reason, pages in s.evictions:
            evictions.add_metric([replica, policy, reason], pages)
    yield from (used, total, evictions)


def _load_families(by_replica: Mapping[str, EngineStats]) -> Iterator[Metric]:
    queue = GaugeMetricFamily(
        "penelope_queue_length", "Requests waiting in the engine.", labels=["replica"]
    )
    running = GaugeMetricFamily(
        "penelope_running_requests", "Requests the engine is running.", labels=["replica"]
    )
    for replica, s in sorted(by_replica.items()):
        queue.add_metric([replica], s.queue_length)
        running.add_metric([replica], s.running)
    yield from (queue, running)


_STORE_FAULTS = (  # (EngineStats field, metric, kind, help)
    ("store_degraded", "penelope_store_degraded", "gauge",
     "1 while the KV store is degraded (its calls failed after their retries)."),
    ("write_behind_bytes", "penelope_write_behind_queue_bytes", "gauge",
     "KV and record bytes queued for the store."),
    ("write_behind_jobs", "penelope_write_behind_queue_jobs", "gauge",
     "Writes queued for the store."),
    ("write_behind_cap_bytes", "penelope_write_behind_cap_bytes", "gauge",
     "The write-behind queues' bound in bytes."),
    ("write_behind_refused", "penelope_write_behind_refused", "counter",
     "Writes refused by a full write-behind queue (their pages stay unstored)."),
    ("write_behind_deferred_pages", "penelope_write_behind_deferred_pages", "counter",
     "Pages not written behind (full queue or degraded store), offered again later."),
    ("store_lost_pages", "penelope_store_lost_pages", "counter",
     "Pages whose store write failed after they were copied (recomputed if needed)."),
    ("store_read_timeouts", "penelope_store_read_timeouts", "counter",
     "Request-path store reads past store_read_budget_s (their pages recomputed)."),
)  # fmt: skip


def _store_fault_families(by_replica: Mapping[str, EngineStats]) -> Iterator[Metric]:
    for field, name, kind, doc in _STORE_FAULTS:
        family = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
            name, doc, labels=["replica"]
        )
        for replica, s in sorted(by_replica.items()):
            family.add_metric([replica], getattr(s, field))
        yield family


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
        yield from (ops, errors, used)


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
        self.pending = Gauge(
            "penelope_api_pending_requests",
            "Admitted, unfinished requests in this API process.",
            registry=self.registry,
        )
        self.registry.register(EngineStatsCollector(source))
        self.registry.register(StoreStatsCollector(store_source))

    def render(self) -> bytes:
        return generate_latest(self.registry)
