"""The engine's Prometheus series come from `EngineStats`' field metadata: the names and
help text are today's, byte for byte, and a new field with its metadata is a new series."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.metrics.series import ApiMetrics, _family, _samples
from penelope_engine.stats import EngineStats, MissTokens, TokenUsage, metric

# `# HELP` lines of the engine's families as the hand-written collector wrote them
ENGINE_HELP = (
    "penelope_tokens_total Prompt tokens by where their KV came from.",
    "penelope_miss_tokens_total Computed prompt tokens by why they were not cache hits.",
    "penelope_cache_hit_ratio Cached prompt tokens / prompt tokens, since start.",
    "penelope_recompute_ratio Recomputed (evicted) prompt tokens / prompt tokens.",
    "penelope_pages KV pages in use.",
    "penelope_pages_capacity KV pages a tier can hold.",
    "penelope_evictions_total Evicted KV pages.",
    "penelope_queue_length Requests waiting in the engine.",
    "penelope_running_requests Requests the engine is running.",
    "penelope_store_degraded 1 while the KV store is degraded (its calls failed after their retries).",  # noqa: E501
    "penelope_write_behind_queue_bytes KV and record bytes queued for the store.",
    "penelope_write_behind_queue_jobs Writes queued for the store.",
    "penelope_write_behind_cap_bytes The write-behind queues' bound in bytes.",
    "penelope_write_behind_refused_total Writes refused by a full write-behind queue (their pages stay unstored).",  # noqa: E501
    "penelope_write_behind_deferred_pages_total Pages not written behind (full queue or degraded store), offered again later.",  # noqa: E501
    "penelope_write_behind_queue_pages KV pages copied out and queued for the store, not yet written (lost if the replica dies now).",  # noqa: E501
    "penelope_store_written_pages_total KV pages written to the store behind the step (turn ends and host evictions).",  # noqa: E501
    "penelope_store_lost_pages_total Pages whose store write failed after they were copied (recomputed if needed).",  # noqa: E501
    "penelope_store_read_timeouts_total Request-path store reads past their budget or skipped in its cool-down (pages: store_read_budget_s, a session record: store_record_budget_s).",  # noqa: E501
)


def help_lines(text: str) -> list[str]:
    return [line[len("# HELP ") :] for line in text.splitlines() if line.startswith("# HELP ")]


def test_the_engine_families_keep_their_names_help_and_order() -> None:
    text = ApiMetrics(dict).render().decode()
    lines = help_lines(text)
    start = lines.index(ENGINE_HELP[0])
    assert tuple(lines[start : start + len(ENGINE_HELP)]) == ENGINE_HELP


def test_samples_carry_their_labels_per_replica() -> None:
    tokens = TokenUsage(device_tokens=3, new_tokens=1, misses=MissTokens(new=1))
    stats = EngineStats(tokens=tokens, pages_host_used=5, evictions=(("lru", "demote", 2),))
    text = ApiMetrics(lambda: {"r1": stats}).render().decode()
    for sample in (
        'penelope_tokens_total{replica="r1",source="device"} 3.0',
        'penelope_miss_tokens_total{cause="new",replica="r1"} 1.0',
        'penelope_cache_hit_ratio{replica="r1"} 0.75',
        'penelope_pages{replica="r1",tier="host"} 5.0',
        'penelope_evictions_total{policy="lru",reason="demote",replica="r1"} 2.0',
    ):
        assert sample in text.splitlines(), sample


def test_a_new_field_with_its_metadata_is_a_new_series() -> None:
    @dataclass(frozen=True)
    class Stats:
        queued_bytes: int = metric("penelope_queued_bytes", "gauge", "Bytes queued.")
        unexported: int = 0

    (sample,) = _samples(Stats)
    family = _family([sample], {"r1": Stats(queued_bytes=9)})  # type: ignore[dict-item]
    assert (family.name, family.type, family.documentation) == (
        "penelope_queued_bytes",
        "gauge",
        "Bytes queued.",
    )
    assert [(s.labels, s.value) for s in family.samples] == [({"replica": "r1"}, 9)]
