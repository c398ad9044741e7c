"""Frozen, validated configuration for the engine, the cache and the scheduler.

Configs never change after construction; values discovered at run time (the
number of pages that fit in memory, say) live in their own result objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar, get_args

from cache_store.health import StoreTuning
from cache_store.location import StoreLocation
from penelope_engine.cache.eviction import EVICTION_POLICIES
from penelope_engine.errors import ConfigError
from penelope_engine.util import require

# The string options, each listed once: mypy checks the Literal, and the validation
# of configs read from YAML or the command line takes its values (`get_args`).
# Eviction policies are strategies: their names are `EVICTION_POLICIES`'s, checked there.
EvictionPolicyName = str
WritePolicy = Literal["off", "write_through", "write_back"]
AdmissionOrder = Literal["fcfs", "program", "aged"]
RetentionMode = Literal["none", "ttl", "return_aware"]
# The model and KV dtypes, named once (`tiers.kv_pool.DTYPES` maps them to torch's).
DType = Literal["float32", "float16", "bfloat16"]
DTYPE_NAMES: tuple[str, ...] = get_args(DType)

WRITE_POLICIES: tuple[WritePolicy, ...] = get_args(WritePolicy)
ADMISSION_ORDERS: tuple[AdmissionOrder, ...] = get_args(AdmissionOrder)
RETENTIONS: tuple[RetentionMode, ...] = get_args(RetentionMode)

_Option = TypeVar("_Option", bound=str)


class _CheckedInPostInit:
    """Marks a Literal field that `__post_init__` checks: loaders that read annotations
    (pydantic, for the serve config's YAML) take it as a str, so a wrong value gets
    the config's own error, which names the valid ones."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler(str)


CHECKED_IN_POST_INIT = _CheckedInPostInit()


def one_of(allowed: tuple[_Option, ...], value: str, what: str) -> _Option:
    """`value` as one of `allowed` (a Literal's values); ConfigError naming them otherwise."""
    for option in allowed:
        if value == option:
            return option
    raise ConfigError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")


def as_write_policy(value: str) -> WritePolicy:
    return one_of(WRITE_POLICIES, value, "write_policy")


def as_admission_order(value: str) -> AdmissionOrder:
    return one_of(ADMISSION_ORDERS, value, "admission")


def as_retention(value: str) -> RetentionMode:
    return one_of(RETENTIONS, value, "retention")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Llama- or Qwen3-style decoder."""

    arch: str  # "llama" or "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position: int = 8192
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    name: str = "model"

    def __post_init__(self) -> None:
        require(
            self.arch in ("llama", "qwen3"), f"arch must be 'llama' or 'qwen3', got {self.arch!r}"
        )
        for f in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position",
        ):
            require(getattr(self, f) > 0, f"{f} must be positive, got {getattr(self, f)}")
        require(
            self.num_heads % self.num_kv_heads == 0,
            f"num_heads ({self.num_heads}) must be a multiple of "
            f"num_kv_heads ({self.num_kv_heads})",
        )
        require(self.head_dim % 2 == 0, f"head_dim must be even for RoPE, got {self.head_dim}")

    @property
    def has_qk_norm(self) -> bool:
        return self.arch == "qwen3"

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class CacheConfig:
    """The KV cache: page size, tier budgets (in pages) and the eviction policy."""

    page_size: int = 16
    device_pages: int = 4096
    host_pages: int = 0  # 0 disables the host tier
    policy: Annotated[EvictionPolicyName, CHECKED_IN_POST_INIT] = "penelope"
    # How device pages reach the host tier: write_through copies a session's new
    # pages at the end of each turn (later demotion is free); write_back copies
    # a page when it is evicted from the device; off keeps the host tier unused.
    write_policy: Annotated[WritePolicy, CHECKED_IN_POST_INIT] = "write_through"
    store_uri: str | None = None  # Arrow store under the host tier (a path or URI); None: none
    store_bytes: int = 8 << 30
    # A session's path record (what another replica reads to continue it) not rewritten
    # for this long is deleted, so records do not pile up in a long-lived store.
    store_record_ttl_s: float = 24 * 3600.0
    # An S3-compatible server for an s3:// store_uri (MinIO, Ceph, ...; None: AWS or
    # $AWS_ENDPOINT_URL) and its region; credentials come from the AWS environment
    # ($AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY, $AWS_PROFILE, an instance role).
    store_endpoint: str | None = None
    store_region: str | None = None
    # Bytes of KV copies waiting for the store at once: at each turn end a session's
    # new pages are written behind, so another replica can continue it. 0: never.
    write_behind_bytes: int = 256 << 20
    # How store calls fail (`cache_store.health`): S3's connect and response timeouts;
    # a failed call is retried `store_retries` times, each after a random sleep up to
    # store_backoff_s * 2**attempt (at most store_backoff_max_s); a call failing after
    # its retries marks the store degraded: then calls fail at once, but one probe every
    # `store_probe_s` (a success ends it). A store read on the request path (pages for
    # an admission, a session's record) waits `store_read_budget_s` at most: past it the
    # pages are recomputed, and the ledger counts them as `store_miss`.
    store_connect_timeout_s: float = 2.0
    store_request_timeout_s: float = 10.0
    store_retries: int = 2
    store_backoff_s: float = 0.1
    store_backoff_max_s: float = 2.0
    store_probe_s: float = 2.0
    store_read_budget_s: float = 0.5
    namespace: str = "default"  # model fingerprint; tenants are namespaced inside it
    # Token sequences an operator declares public (a shared system prompt): a
    # prompt starting with one shares those pages across tenants; everything
    # after them stays the tenant's own.
    public_prefixes: tuple[tuple[int, ...], ...] = ()
    # A session's record (its timing, the pages it has seen) is dropped once it holds
    # no cached page and has been idle this long; past `max_session_records`, the least
    # recently used idle records go first. A request without a session id keeps none.
    session_ttl_s: float = 3600.0
    max_session_records: int = 100_000
    # Quotas on a harness's `retain_s` hints (`penelope_engine.hints`), per tenant: the
    # longest pin one hint gets, and the tokens a tenant's hinted pins may hold at once
    # (None: only `AgentConfig.max_pinned_fraction` of the device bounds them). A hint
    # past a quota is clipped and reported, never an error.
    tenant_pin_seconds: float = 600.0
    tenant_pin_tokens: int | None = None

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
        as_write_policy(self.write_policy)
        require(self.store_bytes > 0, "store_bytes must be positive")
        require(self.store_record_ttl_s > 0, "store_record_ttl_s must be positive")
        require(self.write_behind_bytes >= 0, "write_behind_bytes must be >= 0")
        self.store_tuning()  # raises on a bad timeout, retry or backoff
        require(
            0 < self.store_read_budget_s < math.inf,
            f"store_read_budget_s must be positive and finite, got {self.store_read_budget_s}",
        )
        location = self.store_location()  # raises on a malformed URI, endpoint or region
        require(
            location is not None or not (self.store_endpoint or self.store_region),
            "store_endpoint and store_region need a store_uri (s3://bucket/prefix)",
        )
        EVICTION_POLICIES.check(self.policy)  # UnknownNameError lists the valid ones

    @property
    def active_host_pages(self) -> int:
        """Host pages the cache uses: none when `write_policy` is off."""
        return self.host_pages if self.write_policy != "off" else 0

    def store_tuning(self) -> StoreTuning:
        """The store calls' timeouts, retries and probe interval."""
        try:
            return StoreTuning(
                connect_timeout_s=self.store_connect_timeout_s,
                request_timeout_s=self.store_request_timeout_s,
                retries=self.store_retries,
                backoff_s=self.store_backoff_s,
                backoff_max_s=self.store_backoff_max_s,
                probe_s=self.store_probe_s,
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


@dataclass(frozen=True)
class AgentConfig:
    """Agent-aware scheduling levers (`penelope_engine.sched.agent`); the defaults are off.

    admission: "fcfs" (arrival order, as SGLang and vLLM), "program" (by the
    session's first arrival: Continuum's program-level FCFS) or "aged" (by
    session, but a turn passes only requests that arrived at most
    `age_cap_s` before it, so nobody starves). backfill: when the head of the
    queue does not fit, admit later requests that do, unless the head has
    waited `starvation_s`. retention: pin a session's KV on the device after
    its turn, "ttl" (Continuum: a TTL from the fleet's tool-time distribution,
    held until it expires) or "return_aware" (from the session's own tool
    gaps and stop reason, yielded when a queued request needs the memory).
    park_on_preempt: a preempted request's KV is written through to the host.
    size_weight: added to any order, `size_weight` x the request's estimated
    prefill seconds (what its cache match leaves to compute, by the planner's
    cost): a turn that computes little passes bigger ones that arrived up to
    that many seconds' worth before it (0: off). Finite, so nobody starves.
    prefetch_lead_s: read an idle session's store-only pages into the host tier
    from this many seconds before its expected return (`sched.prefetch`; 0: off).
    """

    admission: Annotated[AdmissionOrder, CHECKED_IN_POST_INIT] = "fcfs"
    age_cap_s: float = 60.0
    backfill: bool = False
    starvation_s: float = 30.0
    retention: Annotated[RetentionMode, CHECKED_IN_POST_INIT] = "none"
    default_ttl_s: float = 10.0  # until enough tool gaps are seen
    min_samples: int = 8  # fleet tool gaps before the TTL is fit (3 for one session's own)
    memory_price: float = 1.0  # device-seconds of compute one device-second of memory is worth
    max_pinned_fraction: float = 0.5  # most of the device that pins may hold
    park_on_preempt: bool = False
    size_weight: float = 0.0
    prefetch_lead_s: float = 0.0

    def __post_init__(self) -> None:
        as_admission_order(self.admission)
        as_retention(self.retention)
        require(self.age_cap_s >= 0 and self.starvation_s >= 0, "age_cap_s, starvation_s >= 0")
        require(self.default_ttl_s >= 0, "default_ttl_s must be >= 0")
        require(self.min_samples >= 1, "min_samples must be >= 1")
        require(self.memory_price > 0, "memory_price must be positive")
        require(0 < self.max_pinned_fraction <= 1, "max_pinned_fraction must be in (0, 1]")
        require(0 <= self.size_weight < math.inf, "size_weight must be finite and >= 0")
        require(0 <= self.prefetch_lead_s < math.inf, "prefetch_lead_s must be finite, >= 0")


@dataclass(frozen=True)
class SchedulerConfig:
    """Continuous batching: how many tokens and sequences one step may carry."""

    max_batch_tokens: int = 2048  # prefill + decode tokens per forward step
    max_running: int = 64
    prefill_chunk: int = 1024  # max query tokens of one request in one step
    max_queue: int = 1024
    agent: AgentConfig = field(default_factory=AgentConfig)

    def __post_init__(self) -> None:
        require(self.max_batch_tokens > 0, "max_batch_tokens must be positive")
        require(self.max_running > 0, "max_running must be positive")
        require(
            0 < self.prefill_chunk <= self.max_batch_tokens,
            "prefill_chunk must be in (0, max_batch_tokens]",
        )
        require(self.max_queue > 0, "max_queue must be positive")


@dataclass(frozen=True)
class EngineConfig:
    """Everything one engine replica needs. `model` names a registry entry or a directory."""

    model: str = "tiny-qwen3"
    device: str = "cpu"
    dtype: DType = "float32"
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        require(
            self.dtype in DTYPE_NAMES,
            f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {self.dtype!r}",
        )
        require(
            self.device == "cpu" or self.device.startswith("cuda"),
            f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}",
        )
