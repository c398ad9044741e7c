"""The HTTP benches' shared client: one streamed `/v1/completions`, read and timed.

`completion_body` writes the request (greedy; streamed with usage unless told
otherwise); `events` reads a server-sent-event stream's data events (None for
the closing `[DONE]`); `stream_completion` sends one streamed request and
returns what came back (`Streamed`: status, replica, text, finish reason, the
last usage, the error event, whether `[DONE]` closed it, and the times of the
first and last chunks that carried a token). A transport error is raised to the
caller: each bench records it in its own form. `async_client` is the benches'
`httpx.AsyncClient`: idle connections expire on the client (2 s) before
uvicorn's 5 s keep-alive closes them, or a request sent on a connection the
server is closing fails to read.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

KEEPALIVE_EXPIRY_S = 2.0
CONNECT_TIMEOUT_S = 30.0


@dataclass
class Streamed:
    """What one streamed completion answered; times are seconds since it was sent."""

    status: int  # HTTP status
    replica: str = ""  # x-penelope-replica
    body: bytes = b""  # a non-200 answer's body
    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)  # the last chunk's that had one
    error: dict[str, Any] | None = None  # the error event's `error`
    done: bool = False  # the stream ended with [DONE]
    first_token_s: float | None = None
    last_token_s: float | None = None


def completion_body(
    model: str,
    prompt: str | Sequence[int],
    max_tokens: int,
    *,
    ignore_eos: bool = False,
    stream: bool = True,
) -> dict[str, Any]:
    """A greedy `/v1/completions` body; streamed with usage unless `stream` is false."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt if isinstance(prompt, str) else list(prompt),
        "max_tokens": max_tokens,
    }
    if ignore_eos:  # every server generates `max_tokens` (vLLM and SGLang take it too)
        body["ignore_eos"] = True
    body["temperature"] = 0
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


async def events(r: httpx.Response) -> AsyncIterator[dict[str, Any] | None]:
    """The stream's data events, parsed; None for `[DONE]`, the last."""
    async for line in r.aiter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            yield None
            return
        yield json.loads(line[6:])


async def stream_completion(
    http: httpx.AsyncClient,
    body: dict[str, Any],
    headers: dict[str, str],
    on_first_token: Callable[[str], Any] | None = None,
) -> Streamed:
    """Send `body` streamed and read the answer to its end; `on_first_token(replica)` runs
    (on a thread) once the first token arrived, while the stream is open."""
    t0 = time.monotonic()
    async with http.stream("POST", "/v1/completions", json=body, headers=headers) as r:
        got = Streamed(r.status_code, r.headers.get("x-penelope-replica", ""))
        if r.status_code != 200:
            got.body = await r.aread()
            return got
        async for event in events(r):
            if event is None:
                got.done = True
                break
            if "error" in event:
                got.error = event["error"]
                continue
            for choice in event.get("choices") or ():
                got.finish_reason = choice.get("finish_reason") or got.finish_reason
                if choice.get("text"):
                    got.text += choice["text"]
                    got.last_token_s = time.monotonic() - t0
                    if got.first_token_s is None:
                        got.first_token_s = got.last_token_s
                        if on_first_token is not None:
                            await asyncio.to_thread(on_first_token, got.replica)
            got.usage = event.get("usage") or got.usage
    return got


def async_client(
    url: str, timeout_s: float, connections: int | None = None, idle: int | None = 20
) -> httpx.AsyncClient:
    """An AsyncClient on `url`: up to `connections` (None: httpx's limits), `idle` of them
    kept alive (None: all), each request within `timeout_s`."""
    limits = httpx.Limits()
    if connections is not None:
        limits = httpx.Limits(
            max_connections=connections,
            max_keepalive_connections=idle,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        )
    timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
    return httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout)


def first_model(url: str) -> str:
    """The first model a server's `/v1/models` lists."""
    r = httpx.get(f"{url}/v1/models", timeout=30)
    r.raise_for_status()
    return str(r.json()["data"][0]["id"])
