"""What the HTTP app talks to: one engine in this process, or engine replicas in Ray.

The app never touches an engine directly. A `Backend` streams
`ReplicaOutput`s (the engine's output plus which replica produced it, and on
the last output that replica's stats) and reports the latest stats per
replica for `/metrics`. `LocalBackend` wraps an in-process engine (standalone
mode, tests); `deployments.ray.ingress.RayBackend` wraps a Ray Serve handle.

An engine whose step loop dies (a fault in a forward pass) must not hang its
requests: while a request waits for output, the engine's liveness is polled,
and a dead engine fails the request with 503. `LocalBackend` then builds a
fresh engine for the next request when it has a factory, as Ray restarts an
engine replica whose health check fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from cache_store import StoreStats
from deployments.api.errors import unavailable
from penelope_engine.hints import HintGrant, SessionHints
from penelope_engine.protocol import (
    EngineProtocol,
    EngineStats,
    GenerateRequest,
    RequestOutput,
)

log = logging.getLogger(__name__)
LIVENESS_POLL_S = 0.25  # how often a request waiting for output checks that its engine runs


class TokenizerLike(Protocol):
    chat_template: str | None

    @property
    def eos_token_ids(self) -> Sequence[int]: ...

    @property
    def added_tokens(self) -> frozenset[str]: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_vars: Any,
    ) -> list[int]: ...


@dataclass(frozen=True)
class ReplicaOutput:
    """One engine output, tagged with the replica that produced it.

    `stats` is that replica's snapshot, sent with the last output of a request
    so that an ingress can export every replica's metrics without polling.
    """

    replica: str
    output: RequestOutput
    stats: EngineStats | None = None


class Backend(Protocol):
    model_name: str
    max_model_len: int

    @property
    def tokenizer(self) -> TokenizerLike: ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[ReplicaOutput]: ...

    def replica_stats(self) -> Mapping[str, EngineStats]: ...

    async def session_hints(
        self, session_id: str, tenant: str, hints: SessionHints
    ) -> list[HintGrant]:
        """Apply hints to the session on the replica that holds it."""
        ...

    def store_stats(self) -> Mapping[str, StoreStats]: ...

    @property
    def healthy(self) -> bool: ...

    async def close(self) -> None: ...


class LocalBackend:
    """One engine in this process, reported as a single replica.

    `restart`, when given, builds a replacement engine (in a thread) once the
    current one has died; without it, requests get 503 until the process is
    restarted.
    """

    def __init__(
        self,
        engine: EngineProtocol,
        replica: str = "standalone",
        restart: Callable[[], EngineProtocol] | None = None,
    ) -> None:
        self.engine = engine
        self.replica = replica
        self.model_name = engine.model_name
        self.max_model_len = engine.max_model_len
        self.tokenizer = engine.tokenizer
        self.restarts = 0
        self._restart = restart
        self._restarting = asyncio.Lock()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[ReplicaOutput]:
        engine = await self._live_engine()
        async for item in stream_with_abort(engine, request, self.replica):
            yield item

    def replica_stats(self) -> Mapping[str, EngineStats]:
        return {self.replica: self.engine.stats()}

    async def session_hints(
        self, session_id: str, tenant: str, hints: SessionHints
    ) -> list[HintGrant]:
        engine = await self._live_engine()
        return await engine.session_hints(session_id, tenant, hints)

    @property
    def healthy(self) -> bool:
        """The engine runs, or a dead one will be replaced by the next request."""
        return self.engine.alive or self._restart is not None

    def store_stats(self) -> Mapping[str, StoreStats]:
        """The Arrow store's counters (write and read errors included), if there is a store."""
        stats = self.engine.store_stats()
        return {self.replica: stats} if stats is not None else {}

    async def close(self) -> None:
        await self.engine.shutdown()

    async def _live_engine(self) -> EngineProtocol:
        if self.engine.alive:
            return self.engine
        if self._restart is None:
            raise unavailable("The engine has stopped; restart the server.", 1)
        async with self._restarting:
            if not self.engine.alive:
                dead = self.engine
                log.error("the engine's step loop stopped; starting a fresh engine")
                self.engine = await asyncio.to_thread(self._restart)
                self.restarts += 1
                await dead.shutdown()
        return self.engine


async def stream_with_abort(
    engine: EngineProtocol, request: GenerateRequest, replica: str
) -> AsyncIterator[ReplicaOutput]:
    """Tag the engine's outputs; abort the request if the consumer stops early.

    A consumer stops early on a stop string, a client disconnect or a timeout;
    the abort frees the request's locks and pages at once instead of at
    garbage collection. An engine that dies mid-request raises 503.

    Each output is awaited in its own task (`step`) so that the engine's
    liveness can be polled meanwhile. A step still pending when this generator
    ends is cancelled, which ends the engine's stream inside that task.
    """
    finished = False
    stream = aiter(engine.generate(request))
    step: asyncio.Future[RequestOutput] | None = None
    try:
        while not finished:
            step = asyncio.ensure_future(anext(stream))
            try:
                out = await _while_alive(engine, step)
            except StopAsyncIteration:
                break
            finished = out.finished
            # The snapshot the step thread took as this request finished: `engine.stats`
            # would wait for the next forward step and hold the last token back with it.
            stats = engine.recent_stats() if finished else None
            yield ReplicaOutput(replica, out, stats)
    except (GeneratorExit, asyncio.CancelledError):
        if not finished:
            # Shielded: under a cancelled scope (a deadline) the abort must still
            # complete, so the request's pages are free before the reply goes out.
            with anyio.CancelScope(shield=True):
                await engine.abort(request.request_id)
        raise
    finally:
        if step is not None and not step.done():
            step.cancel()
        else:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()


async def _while_alive(
    engine: EngineProtocol, step: asyncio.Future[RequestOutput]
) -> RequestOutput:
    """The step's output, unless the engine dies first (then 503)."""
    while True:
        done, _ = await asyncio.wait({step}, timeout=LIVENESS_POLL_S)
        if done:
            return step.result()
        if not engine.alive:
            raise unavailable("The engine stopped while running this request; retry.", 1)
