"""Frozen, validated configuration for the engine, the cache and the scheduler.

Configs never change after construction; values discovered at run time (the
number of pages that fit in memory, say) live in their own result objects.
The named string options live in `penelope_engine.options` and the cache's
config in `penelope_engine.cache_config`; both are re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

from penelope_engine.cache_config import CacheConfig
from penelope_engine.options import (
    ADMISSION_ORDERS,
    ARCH_NAMES,
    ATTENTION_NAMES,
    CHECKED_IN_POST_INIT,
    DTYPE_NAMES,
    RETENTIONS,
    WEIGHT_NAMES,
    WRITE_POLICIES,
    AdmissionOrder,
    Arch,
    DType,
    EvictionPolicyName,
    RetentionMode,
    Weights,
    WritePolicy,
    as_admission_order,
    as_arch,
    as_retention,
    as_write_policy,
    known,
    one_of,
    with_help,
)
from penelope_engine.util import require

__all__ = [
    "ADMISSION_ORDERS",
    "ARCH_NAMES",
    "CHECKED_IN_POST_INIT",
    "DTYPE_NAMES",
    "WEIGHT_NAMES",
    "RETENTIONS",
    "WRITE_POLICIES",
    "AdmissionOrder",
    "AgentConfig",
    "Arch",
    "CacheConfig",
    "DType",
    "EngineConfig",
    "EvictionPolicyName",
    "ModelConfig",
    "RetentionMode",
    "SchedulerConfig",
    "Weights",
    "WritePolicy",
    "as_admission_order",
    "as_arch",
    "as_retention",
    "as_write_policy",
    "one_of",
    "with_help",
]


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Llama- or Qwen3-style decoder."""

    arch: Arch
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
        as_arch(self.arch)
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
class AgentConfig:
    """Agent-aware scheduling levers (`penelope_engine.sched.agent`); the defaults are off.

    admission: "fcfs" (arrival order, as SGLang and vLLM), "program" (by the
    session's first arrival: Continuum's program-level FCFS), "aged" (by
    session, but a turn passes only requests that arrived at most
    `age_cap_s` before it) or "shortest" (by estimated prefill seconds, the
    least first). In every order a request that has waited `starvation_s`
    goes first (the oldest first), so nobody starves. backfill: when the head of the
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

    admission: Annotated[AdmissionOrder, CHECKED_IN_POST_INIT] = with_help(
        "fcfs", "queue order: fcfs, program, aged (by session) or shortest (least prefill first)"
    )
    age_cap_s: float = 60.0
    backfill: bool = False
    starvation_s: float = with_help(30.0, "a request that has waited this long is passed by nobody")
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
    """Continuous batching: how many tokens and sequences one step may carry.

    prefill_chunk: the most query tokens of one request's prefill in one step, so that a
    long prefill shares each step with the decodes and prefills beside it (their latency
    is one step's). solo_prefill_chunk: the most a prefill takes when it runs alone, that
    is when the step carries nothing else (no decode, no other request's chunk), no other
    request is running (none waits on its copies either) and none is queued. Nobody's
    latency is then at stake, and a bigger chunk only costs fewer, wider steps: fewer
    passes over the weights and, for a fresh prompt, one causal attention call instead
    of masked ones over the keys of earlier chunks (docs/results.md 3.5). What arrives
    while such a step runs waits for it, one step as always, but a longer one; the next
    step carries it, and the chunk is `prefill_chunk` again. Production engines do the
    same by default: vLLM and SGLang give a lone request the whole step budget
    (`max_num_batched_tokens`, `chunked_prefill_size`). 0 (the default): always
    `prefill_chunk`; else in ``[prefill_chunk, max_batch_tokens]``.
    max_prefills: the most requests in prefill at once (0: as many as the step's tokens
    allow). Where a step's time grows with its tokens from a few tokens up (a CPU), two
    prefills in one step finish together no sooner than one after the other, and a
    queued request holds no pages: admitting the next prefill only as one finishes keeps
    the pages a finished turn leaves for the session coming back (docs/results.md 1.6).
    Decodes are never held back by it.
    """

    max_batch_tokens: int = with_help(2048, "most tokens of one step")  # prefill + decode
    max_running: int = with_help(64, "most requests running at once")
    prefill_chunk: int = 1024  # max query tokens of one request in one step
    solo_prefill_chunk: int = 0  # max query tokens of a prefill running alone (0: the above)
    max_prefills: int = with_help(0, "most requests in prefill at once (0: no cap)")
    max_queue: int = 1024
    agent: AgentConfig = field(default_factory=AgentConfig)

    def __post_init__(self) -> None:
        require(self.max_batch_tokens > 0, "max_batch_tokens must be positive")
        require(self.max_running > 0, "max_running must be positive")
        require(
            0 < self.prefill_chunk <= self.max_batch_tokens,
            "prefill_chunk must be in (0, max_batch_tokens]",
        )
        require(
            self.solo_prefill_chunk == 0
            or self.prefill_chunk <= self.solo_prefill_chunk <= self.max_batch_tokens,
            "solo_prefill_chunk must be 0 or in [prefill_chunk, max_batch_tokens]",
        )
        require(self.max_prefills >= 0, "max_prefills must be >= 0 (0: no limit)")
        require(self.max_queue > 0, "max_queue must be positive")

    @property
    def solo_chunk(self) -> int:
        """The chunk cap of a prefill that runs alone (`solo_prefill_chunk`)."""
        return self.solo_prefill_chunk or self.prefill_chunk


@dataclass(frozen=True)
class EngineConfig:
    """Everything one engine replica needs. `model` names a registry entry or a directory."""

    model: str = with_help("tiny-qwen3", "registered model name or checkpoint directory")
    device: str = with_help("cpu", "cpu or cuda[:N]")
    dtype: DType = with_help("float32", "model dtype")
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    seed: int = 0
    attention: str = with_help(
        "auto", "attention backend: auto (flex on CUDA, pieces elsewhere), pieces, sdpa, flex"
    )
    decode_graphs: bool = with_help(
        True, "CUDA with flex attention: replay decode steps as CUDA graphs, per batch size"
    )
    weights: Weights = with_help(
        "float",
        "linear-layer weights: float (in the model dtype), int8 (one scale per output "
        "channel) or int4 (groups of 32 inputs, GGUF Q4_1's levels): decode steps read "
        "them, prefill runs the model dtype over the values they stand for; CPU only",
    )

    def __post_init__(self) -> None:
        require(
            self.dtype in DTYPE_NAMES,
            f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {self.dtype!r}",
        )
        one_of(WEIGHT_NAMES, self.weights, "weights")
        require(
            self.weights == "float" or self.device == "cpu",
            f"weights {self.weights} runs on the CPU only, got device {self.device!r}",
        )
        require(
            self.device == "cpu" or self.device.startswith("cuda"),
            f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}",
        )
        known(ATTENTION_NAMES, self.attention, "attention backend")
        require(
            self.cache.device_memory_fraction == 0 or self.device.startswith("cuda"),
            "cache.device_memory_fraction sizes a CUDA device's pool: on a CPU set "
            "cache.device_pages",
        )
