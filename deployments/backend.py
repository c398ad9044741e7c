"""What the HTTP app talks to: one engine in this process, or engine replicas in Ray.

The app never touches an engine directly. A `Backend` streams
`ReplicaOutput`s (the engine's output plus which replica produced it, and on
the last output that replica's stats) and reports the latest stats per
replica for `/metrics`. `LocalBackend` wraps an in-process engine (standalone
mode, tests); `deployments.ingress.RayBackend` wraps a Ray Serve handle.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from penelope_engine.protocol import EngineStats, GenerateRequest, RequestOutput


class TokenizerLike(Protocol):
    @property
    def eos_token_ids(self) -> Sequence[int]: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]: ...


class ServingEngine(Protocol):
    """The engine surface the API needs: the protocol plus model facts."""

    model_name: str
    max_model_len: int

    @property
    def tokenizer(self) -> TokenizerLike: ...

    def generate(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]: ...

    def stats(self) -> EngineStats: ...

    async def abort(self, request_id: str) -> bool: ...

    async def shutdown(self) -> None: ...


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

    async def close(self) -> None: ...


class LocalBackend:
    """One engine in this process, reported as a single replica."""

    def __init__(self, engine: ServingEngine, replica: str = "standalone") -> None:
        self.engine = engine
        self.replica = replica
        self.model_name = engine.model_name
        self.max_model_len = engine.max_model_len
        self.tokenizer = engine.tokenizer

    async def generate(self, request: GenerateRequest) -> AsyncIterator[ReplicaOutput]:
        async for item in stream_with_abort(self.engine, request, self.replica):
            yield item

    def replica_stats(self) -> Mapping[str, EngineStats]:
        return {self.replica: self.engine.stats()}

    async def close(self) -> None:
        await self.engine.shutdown()


async def stream_with_abort(
    engine: ServingEngine, request: GenerateRequest, replica: str
) -> AsyncIterator[ReplicaOutput]:
    """Tag the engine's outputs; abort the request if the consumer stops early.

    A consumer stops early on a stop string or a client disconnect; the abort
    frees the request's locks and pages at once instead of at garbage
    collection.
    """
    finished = False
    stream = engine.generate(request)
    try:
        async for out in stream:
            finished = out.finished
            yield ReplicaOutput(replica, out, engine.stats() if finished else None)
    except (GeneratorExit, asyncio.CancelledError):
        if not finished:
            await engine.abort(request.request_id)
        raise
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
