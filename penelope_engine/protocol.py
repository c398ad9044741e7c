"""The engine interface: requests in, an async stream of outputs back.

Every engine (the torch engine here, the SGLang adapter) implements
`EngineProtocol`, so deployments, the router and the benchmarks do not care
which one runs.

Streaming convention: `generate` yields one `RequestOutput` per step that
produced tokens; `token_ids` holds only the new tokens of that step; the last
output has `finished=True` and a `finish_reason`. Errors in the request raise
`InvalidRequestError` before the first yield; capacity problems raise
`CapacityError`. Cancelling the consuming task aborts the request and frees
its pages.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from penelope_engine.errors import ConfigError, InvalidRequestError
from penelope_engine.hints import NO_HINTS, HintGrant, SessionHints
from penelope_engine.stats import MISS_CAUSES, EngineStats, MissTokens, TokenUsage

__all__ = ["MISS_CAUSES", "EngineStats", "MissTokens", "TokenUsage"]  # re-exported (`stats`)

if TYPE_CHECKING:  # (this module stays light: no tokenizers, no pyarrow)
    from cache_store import StoreStats
    from penelope_engine.tokenizer import Tokenizer


# Below this temperature sampling is greedy: near zero, softmax(logits / t) is argmax,
# and float32 logits divided by it would overflow to inf (NaN probabilities).
GREEDY_BELOW_TEMPERATURE = 1e-3

# Why a request ended: a stop token (or stop string), its token limit, or an abort.
FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0  # 0 (below GREEDY_BELOW_TEMPERATURE) means greedy
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not (0.0 <= self.temperature <= 2.0) or math.isnan(self.temperature):
            raise InvalidRequestError(f"temperature must be in [0, 2], got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not (-(2**63) <= self.seed < 2**63):
            raise InvalidRequestError(f"seed must be a 64-bit integer, got {self.seed}")


@dataclass(frozen=True)
class GenerateRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    session_id: str | None = None  # None: the request is its own session
    tenant: str = "default"
    # How the agent's turn ends, when the caller knows ("tool_use": back in
    # seconds; "end_turn": a human answers). Return-aware eviction uses it.
    stop_reason_hint: str | None = None
    # Ids of the prompt's first full pages as the engine names them (`FirstPages`): the
    # Ray ingress sets them so the router can place a new session by its cached
    # prefix; the engine does not read them.
    prefix_hashes: tuple[int, ...] = ()
    # A harness's hints for this session (`penelope_engine.hints`); none by default.
    hints: SessionHints = NO_HINTS
    # The caller knows the prompt continues earlier turns (a chat with an assistant
    # message): the miss ledger calls a session with no record here `moved_replica`.
    has_history: bool = False
    # The output must match this grammar (llguidance's grammar text, built by
    # `deployments.api.tools.constraint`); the sampler masks this request's logits with it.
    grammar: str | None = None
    # A regex that finds a tool call in the decoded completion: with no
    # stop_reason_hint, the turn ends as "tool_use" when it matches, else "end_turn".
    tool_call_pattern: str | None = None

    @property
    def engine_session_id(self) -> str:
        """The id the engine keys the session on: `session_id`, or the request's own."""
        return self.session_id if self.session_id is not None else f"req:{self.request_id}"


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    token_ids: tuple[int, ...]
    finished: bool = False
    finish_reason: FinishReason | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    ttft_s: float | None = None  # set once the first token exists
    # On the last output: what the engine did with the request's hints, and where its
    # prompt left the session's last one (in tokens; None: it did not).
    hints: tuple[HintGrant, ...] = ()
    prompt_edit_at: int | None = None


@dataclass(frozen=True)
class DigestLimits:
    """How much of a replica's cache its router digest carries: the `sessions` most
    recently used sessions and the first `prefix_pages` shared-prefix page ids.

    `DIGEST_LIMITS` is the one home of these numbers: every `session_digests` and
    `shared_prefix_hashes` default (engines, caches, the SGLang adapter), the digest a
    replica publishes (`router.digest.build_digest`) and the simulator's take them."""

    sessions: int = 1024
    prefix_pages: int = 256

    def __post_init__(self) -> None:
        if self.sessions < 0 or self.prefix_pages < 0:
            raise ConfigError(
                f"digest limits must be >= 0, got sessions={self.sessions}, "
                f"prefix_pages={self.prefix_pages}"
            )


DIGEST_LIMITS = DigestLimits()


@dataclass(frozen=True)
class SessionDigest:
    """What a replica holds of one session, for the router."""

    session_id: str
    device_tokens: int
    host_tokens: int
    store_tokens: int
    last_access: float  # in the engine's `clock()`, not wall time


# Why a drain could not leave a session's history whole in the store (`DrainReport`).
UNDRAINED_NO_STORE = "no store is configured"
UNDRAINED_PAGES_REFUSED = "the store refused its pages"
UNDRAINED_PAGES_LOST = "the store refused pages of it written behind at a turn end"
UNDRAINED_PAGES_LATE = "the drain's deadline passed before its pages were written"
UNDRAINED_RECORD_REFUSED = "the store refused its record"
UNDRAINED_RECORD_LATE = "the drain's deadline passed before its record was written"


@dataclass(frozen=True)
class DrainReport:
    """What a leaving replica's drain did (`EngineProtocol.drain_to_store`): pages and
    records it wrote (the rest were in the store already, written behind), and every
    session it held whose history it could not leave whole in the store, with why.
    A session named here recomputes what is missing wherever its next turn goes."""

    pages: int = 0
    records: int = 0
    records_left: int = 0  # stale records the deadline left unwritten
    in_time: bool = True  # the writes behind and the pages finished within the deadline
    seconds: float = 0.0
    undrained: tuple[tuple[str, str], ...] = ()  # (session id, why), one per session


class EngineProtocol(Protocol):
    """What every engine offers its callers: the API's backend, the Ray replica, the benches.

    Callers use only these members, never an engine's internals. An engine that
    cannot answer one (the SGLang adapter has no Penelope store, say) returns a
    neutral value and says so in its docstring. Members that read the cache
    (`stats`, `session_digests`, ...) may wait for the engine's current step:
    call them off the event loop.
    """

    @property
    def model_name(self) -> str: ...

    @property
    def max_model_len(self) -> int:
        """The model's window: prompt plus completion tokens."""
        ...

    @property
    def vocab_size(self) -> int:
        """Token ids of a prompt must be in [0, vocab_size)."""
        ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def alive(self) -> bool:
        """The engine still runs requests (for health checks)."""
        ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]: ...

    async def abort(self, request_id: str) -> bool:
        """Abort a request, once its pages are free; False if it is not running here."""
        ...

    async def session_hints(
        self, session_id: str, tenant: str, hints: SessionHints
    ) -> list[HintGrant]:
        """Apply a harness's hints to an idle session of `tenant` after its turn ended
        (`POST /v1/penelope/sessions/{id}`); what each hint was granted."""
        ...

    def stats(self) -> EngineStats: ...

    def recent_stats(self) -> EngineStats:
        """`stats` as of the last request that finished, without waiting for the current
        step: what a request's last output carries, so the output is not held back a step."""
        ...

    def store_stats(self) -> StoreStats | None:
        """The shared KV store's counters; None without a store."""
        ...

    def session_digests(self, limit: int = DIGEST_LIMITS.sessions) -> list[SessionDigest]: ...

    def shared_prefix_hashes(self, limit: int = DIGEST_LIMITS.prefix_pages) -> list[int]:
        """Page ids of shared prefixes held on the device (the router's digest)."""
        ...

    def clock(self) -> float:
        """Now, in the clock that `SessionDigest.last_access` uses."""
        ...

    def check_integrity(self) -> None:
        """Raise AssertionError if the cache's bookkeeping is inconsistent."""
        ...

    def drain_to_store(self) -> DrainReport:
        """Write the cached KV the store lacks to it (a replica leaving): what was written,
        and the sessions whose history could not be left whole there, with why."""
        ...

    async def shutdown(self) -> None: ...
