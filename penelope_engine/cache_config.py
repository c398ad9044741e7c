"""`CacheConfig`: the KV cache's page size, tier budgets, eviction policy and store.

Frozen and validated like every config (`penelope_engine.config` re-exports it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Annotated

from cache_store.health import StoreTuning
from cache_store.location import StoreLocation
from penelope_engine.errors import ConfigError
from penelope_engine.options import (
    CHECKED_IN_POST_INIT,
    EVICTION_NAMES,
    EvictionPolicyName,
    WritePolicy,
    as_write_policy,
    known,
    with_help,
)
from penelope_engine.util import require

_TUNING = StoreTuning()  # the store calls' defaults, in their one home


@dataclass(frozen=True)
class CacheConfig:
    """The KV cache: page size, tier budgets (in pages) and the eviction policy."""

    page_size: int = with_help(16, "tokens per KV page")
    device_pages: int = with_help(4096, "KV pages on the device")
    host_pages: int = 0  # 0 disables the host tier
    policy: Annotated[EvictionPolicyName, CHECKED_IN_POST_INIT] = with_help(
        "penelope", "eviction policy"
    )
    # How device pages reach the host tier: write_through copies a session's new
    # pages at the end of each turn (later demotion is free); write_back copies
    # a page when it is evicted from the device; off keeps the host tier unused.
    write_policy: Annotated[WritePolicy, CHECKED_IN_POST_INIT] = "write_through"
    store_uri: str | None = with_help(  # None: no store
        None, "Arrow store under the host tier: a path or s3:// URI"
    )
    store_bytes: int = with_help(8 << 30, "the store's byte budget")
    # A session's path record (what another replica reads to continue it) not rewritten
    # for this long is deleted, so records do not pile up in a long-lived store.
    store_record_ttl_s: float = 24 * 3600.0
    # An S3-compatible server for an s3:// store_uri (MinIO, Ceph, ...; None: AWS or
    # $AWS_ENDPOINT_URL) and its region; credentials come from the AWS environment
    # ($AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY, $AWS_PROFILE, an instance role).
    store_endpoint: str | None = with_help(None, "an S3-compatible server's URL")
    store_region: str | None = with_help(None, "the S3 region")
    # Bytes of KV copies waiting for the store at once: at each turn end a session's
    # new pages are written behind, so another replica can continue it. 0: never.
    write_behind_bytes: int = with_help(
        256 << 20, "KV bytes queued for the store at once (the write-behind cap)"
    )
    # How store calls fail (`cache_store.health`): S3's connect and response timeouts;
    # a failed call is retried `store_retries` times, each after a random sleep up to
    # store_backoff_s * 2**attempt (at most store_backoff_max_s); a call failing after
    # its retries marks the store degraded: then calls fail at once, but one probe every
    # `store_probe_s` (a success ends it). A store read on the request path (pages for
    # an admission, a session's record) waits `store_read_budget_s` at most: past it the
    # pages are recomputed, and the ledger counts them as `store_miss`.
    # Each `store_X` is `StoreTuning`'s `X`, with its default from there (`store_tuning`).
    store_connect_timeout_s: float = _TUNING.connect_timeout_s
    store_request_timeout_s: float = with_help(
        _TUNING.request_timeout_s, "seconds an S3 call may wait for its response"
    )
    store_retries: int = _TUNING.retries
    store_backoff_s: float = _TUNING.backoff_s
    store_backoff_max_s: float = _TUNING.backoff_max_s
    store_probe_s: float = with_help(_TUNING.probe_s, "seconds between probes of a degraded store")
    store_read_budget_s: float = with_help(
        0.5, "seconds a request-path store read may take; past it the pages are recomputed"
    )
    # An arriving session's record (a small object naming its pages) is read before the
    # request is queued, off the step thread, on readers of its own: a slow read delays
    # that request only, and a page read's overrun never makes a record read skipped.
    # Without its record a moved session recomputes its whole history, so it waits longer.
    store_record_budget_s: float = with_help(
        2.0, "seconds an arriving session's record read may take; past it, its history recomputes"
    )
    namespace: str = "default"  # model fingerprint; tenants are namespaced inside it
    # Token sequences an operator declares public (a shared system prompt): a
    # prompt starting with one shares those pages across tenants; everything
    # after them stays the tenant's own.
    public_prefixes: tuple[tuple[int, ...], ...] = ()
    # A session's record (its timing, the pages it has seen) is dropped once it holds
    # no cached page and has been idle this long; past `max_session_records`, the least
    # recently used idle records go first. A request without a session id keeps none.
    session_ttl_s: float = with_help(
        3600.0, "drop an idle session's record once it holds no cached page after this long"
    )
    max_session_records: int = with_help(
        100_000, "session records kept at most (the least recently used idle ones go first)"
    )
    # Quotas on a harness's `retain_s` hints (`penelope_engine.hints`), per tenant: the
    # longest pin one hint gets, and the tokens a tenant's hinted pins may hold at once
    # (None: only `AgentConfig.max_pinned_fraction` of the device bounds them). A hint
    # past a quota is clipped and reported, never an error.
    tenant_pin_seconds: float = with_help(
        600.0, "longest pin a harness's retain_s hint gets; longer ones are clipped"
    )
    tenant_pin_tokens: int | None = with_help(
        None, "tokens one tenant's hinted pins may hold at once (default: no per-tenant quota)"
    )
    # On CUDA: the share of the GPU's memory the engine may hold. Its KV pages are then
    # what the weights and a warm-up step of the largest size leave (`device_memory`),
    # and `device_pages` is ignored. 0: `device_pages` as set.
    device_memory_fraction: float = with_help(
        0.0, "CUDA: share of GPU memory to use; KV gets what is left (0: device_pages)"
    )
    # The device pool as bytes rather than pages: `device_pages` becomes as many pages as
    # fit in these bytes at the model's KV dtype (a bfloat16 pool holds twice float32's
    # tokens), so servers of different dtypes compare at equal memory. 0: `device_pages`.
    device_kv_bytes: int = with_help(
        0, "KV bytes on the device; sets device_pages for the KV dtype (0: device_pages)"
    )

    def __post_init__(self) -> None:
        require(
            0 <= self.tenant_pin_seconds < math.inf,
            f"tenant_pin_seconds must be finite and >= 0, got {self.tenant_pin_seconds}",
        )
        require(
            self.tenant_pin_tokens is None or self.tenant_pin_tokens >= 0,
            f"tenant_pin_tokens must be >= 0 (or None: no quota), got {self.tenant_pin_tokens}",
        )
        require(self.session_ttl_s > 0, f"session_ttl_s must be positive, got {self.session_ttl_s}")
        require(
            self.max_session_records > 0,
            f"max_session_records must be positive, got {self.max_session_records}",
        )
        require(self.page_size > 0, f"page_size must be positive, got {self.page_size}")
        require(self.device_pages > 0, f"device_pages must be positive, got {self.device_pages}")
        require(self.host_pages >= 0, f"host_pages must be >= 0, got {self.host_pages}")
        require(
            0 <= self.device_memory_fraction < 1,
            f"device_memory_fraction must be in [0, 1), got {self.device_memory_fraction}",
        )
        require(self.device_kv_bytes >= 0, "device_kv_bytes must be >= 0")
        require(
            not (self.device_kv_bytes and self.device_memory_fraction),
            "set device_kv_bytes or device_memory_fraction, not both",
        )
        as_write_policy(self.write_policy)
        require(self.store_bytes > 0, "store_bytes must be positive")
        require(self.store_record_ttl_s > 0, "store_record_ttl_s must be positive")
        require(self.write_behind_bytes >= 0, "write_behind_bytes must be >= 0")
        self.store_tuning()  # raises on a bad timeout, retry or backoff
        require(
            0 < self.store_read_budget_s < math.inf,
            f"store_read_budget_s must be positive and finite, got {self.store_read_budget_s}",
        )
        require(
            0 < self.store_record_budget_s < math.inf,
            f"store_record_budget_s must be positive and finite, got {self.store_record_budget_s}",
        )
        location = self.store_location()  # raises on a malformed URI, endpoint or region
        require(
            location is not None or not (self.store_endpoint or self.store_region),
            "store_endpoint and store_region need a store_uri (s3://bucket/prefix)",
        )
        known(EVICTION_NAMES, self.policy, "eviction policy")

    @property
    def active_host_pages(self) -> int:
        """Host pages the cache uses: none when `write_policy` is off."""
        return self.host_pages if self.write_policy != "off" else 0

    def store_tuning(self) -> StoreTuning:
        """The store calls' timeouts, retries and probe interval."""
        try:
            return StoreTuning(
                **{f.name: getattr(self, f"store_{f.name}") for f in fields(StoreTuning)}
            )
        except ValueError as e:
            raise ConfigError(f"store_{e}") from e

    def store_location(self) -> StoreLocation | None:
        """Where the Arrow store is, or None without one."""
        if not self.store_uri:
            return None
        try:
            return StoreLocation(self.store_uri, self.store_endpoint, self.store_region)
        except ValueError as e:
            raise ConfigError(str(e)) from e
