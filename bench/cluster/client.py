"""The cluster bench's HTTP client: greedy streamed turns whose answers can be compared.

The sessions are `bench.plan`'s (seeded Claude Code sessions written as
text prompts, one token per word; each prompt extends the previous turn's),
sent as streamed `/v1/completions` with `temperature: 0`, the session in
`x-session-id` and the tenant's API key. A turn keeps what the model answered
(text, completion tokens, finish reason), which replica answered and
Penelope's `usage.penelope` breakdown, and how the stream ended (an error
event, `[DONE]`), so a turn after a fault can be held against the same turn of
the reference run.

`cut_turn` streams one turn and, once tokens flow, runs a fault (a replica
kill, a node loss) on the replica streaming it, while the stream is open, then
reads the stream to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from bench.client import async_client, completion_body, stream_completion
from bench.cluster.config import MODEL
from bench.plan import SessionPlan, TurnPlan

CUT_MAX_TOKENS = 400  # long enough to be mid-stream when the fault lands
T = TypeVar("T")


@dataclass(frozen=True)
class Turn:
    session: str
    turn: int
    status: int  # HTTP status (0: no response)
    replica: str  # x-penelope-replica
    text: str
    finish_reason: str | None
    usage: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the error event's code, or a transport error
    done: bool = False  # the stream ended with [DONE]

    @property
    def answer(self) -> tuple[str, int | None, str | None]:
        """What greedy decoding must reproduce: text, completion tokens, finish reason."""
        return self.text, self.usage.get("completion_tokens"), self.finish_reason

    @property
    def server_error(self) -> bool:
        return (
            self.status >= 500 or self.error is not None or (self.status == 200 and not self.done)
        )

    @property
    def store_tokens(self) -> int:
        return int((self.usage.get("penelope") or {}).get("store_tokens", 0))


async def send_turn(
    http: httpx.AsyncClient,
    sid: str,
    k: int,
    t: TurnPlan,
    key: str,
    max_tokens: int | None = None,
    on_first_token: Callable[[str], Any] | None = None,
) -> Turn:
    headers = {"x-session-id": sid, "authorization": f"Bearer {key}"}
    body = completion_body(MODEL, t.prompt, max_tokens or t.max_tokens)
    try:
        got = await stream_completion(http, body, headers, on_first_token)
    except httpx.HTTPError as exc:
        return Turn(sid, k, 0, "", "", None, error=f"transport:{type(exc).__name__}")
    if got.status != 200:
        error = got.body.decode(errors="replace")[:200]
        return Turn(sid, k, got.status, got.replica, "", None, error=error)
    code = None if got.error is None else str(got.error.get("code"))
    return Turn(sid, k, 200, got.replica, got.text, got.finish_reason, got.usage, code, got.done)


def _with_client(
    url: str, timeout_s: float, work: Callable[[httpx.AsyncClient], Awaitable[T]]
) -> T:
    """`work(http)` on a client of `url`, all of it within `timeout_s`."""

    async def run() -> T:
        async with async_client(url, timeout_s) as http:
            return await work(http)

    return asyncio.run(asyncio.wait_for(run(), timeout_s))


def turn_all(
    url: str, sessions: Sequence[tuple[str, SessionPlan]], k: int, key: str, timeout_s: float
) -> list[Turn]:
    """Turn `k` of every session at once; their answers in `sessions`' order."""

    async def work(http: httpx.AsyncClient) -> list[Turn]:
        return list(
            await asyncio.gather(*(send_turn(http, sid, k, p.turns[k], key) for sid, p in sessions))
        )

    return _with_client(url, timeout_s, work)


def whole_sessions(
    url: str, sessions: Sequence[tuple[str, SessionPlan]], key: str, timeout_s: float
) -> list[Turn]:
    """Every session's turns one after the other, the sessions at once (the reference run)."""

    async def work(http: httpx.AsyncClient) -> list[Turn]:
        async def one(sid: str, p: SessionPlan) -> list[Turn]:
            return [await send_turn(http, sid, k, t, key) for k, t in enumerate(p.turns)]

        runs = await asyncio.gather(*(one(sid, p) for sid, p in sessions))
        return [t for run in runs for t in run]

    return _with_client(url, timeout_s, work)


def cut_turn(
    url: str, sid: str, t: TurnPlan, key: str, fault: Callable[[str], Any], timeout_s: float
) -> Turn:
    """A long streamed turn of `sid`; `fault(replica)` runs once its first tokens arrived."""

    def work(http: httpx.AsyncClient) -> Awaitable[Turn]:
        return send_turn(http, sid, -1, t, key, max_tokens=CUT_MAX_TOKENS, on_first_token=fault)

    return _with_client(url, timeout_s, work)
