"""Token counters and engine stats, each field with how it is exported.

`TokenUsage` is the one type of token counters: a request's usage (where each
prompt token's KV came from, its completion tokens, its misses by cause) and,
summed, an engine's cumulative `EngineStats.tokens`. A field that is a
Prometheus series says so in its metadata (`metric`): the family's name, kind
and help and the labels its samples carry, so `deployments.metrics.series`
derives `/metrics` from these classes and a new engine metric is one field here:

    queue_length: int = metric("penelope_queue_length", "gauge", "Requests waiting ...")

Three shapes: a scalar field is one sample (with fixed `labels`: `tier="device"`);
a nested stats dataclass with `each=` is one sample per field of it, labelled by
the field's name (`cause` of `MissTokens`); a tuple of rows with `rows=` is one
sample per row, its leading values the labels and its last the value
(`evictions`). A nested dataclass without metadata is walked into, and its
`DERIVED` series (read from properties: the ratios) follow its fields. Fields
without metadata (leak checks, bounded state) are not exported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Literal

MetricKind = Literal["counter", "gauge"]


@dataclass(frozen=True)
class Series:
    """How one stats field is exported: into family `name` (counters get `_total`), of
    `kind`, with `help`; see the module docstring for `labels`, `each` and `rows`."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[tuple[str, str], ...] = ()
    each: str | None = None
    rows: tuple[str, ...] = ()

    @property
    def label_names(self) -> tuple[str, ...]:
        if self.each is not None:
            return (self.each,)
        return self.rows or tuple(name for name, _ in self.labels)


def metric(
    name: str,
    kind: MetricKind,
    help: str,
    *,
    default: Any = 0,
    each: str | None = None,
    rows: tuple[str, ...] = (),
    **labels: str,
) -> Any:
    """A stats field exported as `Series(name, kind, help, ...)`; `default` (0 unless
    given) or a `default_factory` for a dataclass default (`each`)."""
    series = Series(name, kind, help, tuple(labels.items()), each, rows)
    if isinstance(default, type):  # a nested stats dataclass: built fresh per instance
        return field(default_factory=default, metadata={"series": series})
    return field(default=default, metadata={"series": series})


@dataclass(frozen=True)
class MissTokens:
    """Computed prompt tokens by why they were not cache hits (`sched.ledger` says how
    each is told); they sum to recomputed + new tokens. The fields are the causes."""

    new: int = 0
    evicted_device: int = 0
    dropped_host: int = 0
    store_miss: int = 0
    recompute_cheaper: int = 0
    moved_replica: int = 0
    prompt_edit: int = 0
    tenant: int = 0

    @property
    def total(self) -> int:
        return sum(self.as_dict().values())

    def as_dict(self) -> dict[str, int]:
        return {c: getattr(self, c) for c in MISS_CAUSES}

    def __add__(self, other: MissTokens) -> MissTokens:
        return MissTokens(*(getattr(self, c) + getattr(other, c) for c in MISS_CAUSES))


MISS_CAUSES = tuple(f.name for f in fields(MissTokens))  # in the ledger's order

_SOURCES = "Prompt tokens by where their KV came from."
_HIT = "Cached prompt tokens / prompt tokens, since start."
_RECOMPUTE = "Recomputed (evicted) prompt tokens / prompt tokens."


@dataclass(frozen=True)
class TokenUsage:
    """Where each prompt token's KV came from, plus completion tokens.

    prompt_tokens == device_tokens + host_tokens + store_tokens
                     + recomputed_tokens + new_tokens
    `recomputed_tokens` were cached once and evicted (holes); `new_tokens` were
    never cached for this session (including a partial last page). `misses`
    splits the computed ones (recomputed + new) by why (the miss ledger).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    device_tokens: int = metric("penelope_tokens", "counter", _SOURCES, source="device")
    host_tokens: int = metric("penelope_tokens", "counter", _SOURCES, source="host")
    store_tokens: int = metric("penelope_tokens", "counter", _SOURCES, source="store")
    recomputed_tokens: int = metric("penelope_tokens", "counter", _SOURCES, source="recomputed")
    new_tokens: int = metric("penelope_tokens", "counter", _SOURCES, source="new")
    misses: MissTokens = metric(
        "penelope_miss_tokens",
        "counter",
        "Computed prompt tokens by why they were not cache hits.",
        default=MissTokens,
        each="cause",
    )

    # (property, series) exported after the fields, cumulative since the replica started
    DERIVED: ClassVar[tuple[tuple[str, Series], ...]] = (
        ("hit_ratio", Series("penelope_cache_hit_ratio", "gauge", _HIT)),
        ("recompute_ratio", Series("penelope_recompute_ratio", "gauge", _RECOMPUTE)),
    )

    @property
    def cached_tokens(self) -> int:
        return self.device_tokens + self.host_tokens + self.store_tokens

    @property
    def sourced_tokens(self) -> int:
        """Prompt tokens counted by source (cached, recomputed, new)."""
        return self.cached_tokens + self.recomputed_tokens + self.new_tokens

    @property
    def hit_ratio(self) -> float:
        total = self.sourced_tokens
        return self.cached_tokens / total if total else 0.0

    @property
    def recompute_ratio(self) -> float:
        total = self.sourced_tokens
        return self.recomputed_tokens / total if total else 0.0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return replace(
            self,
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)},
        )


_USED, _CAPACITY = "KV pages in use.", "KV pages a tier can hold."


@dataclass(frozen=True)
class EngineStats:
    """Cumulative counters and current gauges of one engine replica."""

    tokens: TokenUsage = field(default_factory=TokenUsage)  # prompt tokens, summed
    pages_device_used: int = metric("penelope_pages", "gauge", _USED, tier="device")
    pages_device_total: int = metric("penelope_pages_capacity", "gauge", _CAPACITY, tier="device")
    pages_host_used: int = metric("penelope_pages", "gauge", _USED, tier="host")
    pages_host_total: int = metric("penelope_pages_capacity", "gauge", _CAPACITY, tier="host")
    evictions: tuple[tuple[str, str, int], ...] = metric(  # (policy, reason, pages)
        "penelope_evictions", "counter", "Evicted KV pages.", default=(), rows=("policy", "reason")
    )
    queue_length: int = metric("penelope_queue_length", "gauge", "Requests waiting in the engine.")
    running: int = metric("penelope_running_requests", "gauge", "Requests the engine is running.")
    # Leak checks (bench.load): both are 0 once every request has ended.
    request_pages: int = 0  # device pages running requests hold outside the prefix tree
    locked_nodes: int = 0  # prefix-tree nodes locked by running requests
    # Bounded state (bench.soak): flat once traffic is steady.
    tree_nodes: int = 0  # prefix-tree nodes
    session_records: int = 0  # sessions the cache keeps a record of
    # The store's faults (`cache_store.health`, `tiers.budget`, `tiers.handover`):
    store_degraded: int = metric(
        "penelope_store_degraded",
        "gauge",
        "1 while the KV store is degraded (its calls failed after their retries).",
    )
    write_behind_bytes: int = metric(  # the queues' bytes now
        "penelope_write_behind_queue_bytes", "gauge", "KV and record bytes queued for the store."
    )
    write_behind_jobs: int = metric(
        "penelope_write_behind_queue_jobs", "gauge", "Writes queued for the store."
    )
    write_behind_cap_bytes: int = metric(  # `CacheConfig.write_behind_bytes`
        "penelope_write_behind_cap_bytes", "gauge", "The write-behind queues' bound in bytes."
    )
    write_behind_refused: int = metric(
        "penelope_write_behind_refused",
        "counter",
        "Writes refused by a full write-behind queue (their pages stay unstored).",
    )
    write_behind_deferred_pages: int = metric(
        "penelope_write_behind_deferred_pages",
        "counter",
        "Pages not written behind (full queue or degraded store), offered again later.",
    )
    write_behind_pages: int = metric(
        "penelope_write_behind_queue_pages",
        "gauge",
        "KV pages copied out and queued for the store, not yet written (lost if the "
        "replica dies now).",
    )
    store_written_pages: int = metric(
        "penelope_store_written_pages",
        "counter",
        "KV pages written to the store behind the step (turn ends and host evictions).",
    )
    store_lost_pages: int = metric(
        "penelope_store_lost_pages",
        "counter",
        "Pages whose store write failed after they were copied (recomputed if needed).",
    )
    store_read_timeouts: int = metric(
        "penelope_store_read_timeouts",
        "counter",
        "Request-path store reads past their budget or skipped in its cool-down (pages: "
        "store_read_budget_s, a session record: store_record_budget_s).",
    )

    @property
    def hit_ratio(self) -> float:
        return self.tokens.hit_ratio

    @property
    def recompute_ratio(self) -> float:
        return self.tokens.recompute_ratio
