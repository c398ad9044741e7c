"""A recording pass-through in front of the server: each request as the server saw it.

Claude Code or Codex talks to this proxy; it forwards every request unchanged to
the upstream server and records, per request to one of `paths` (`/v1/messages` by
default), its headers, its body (for the prompt's tokens), the status, and the usage the
server answered (from the JSON body, or the stream's `message_start` and
`message_delta` events, or the Responses API's final `response.*` event).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}
RESPONSE_ENDS = ("response.completed", "response.incomplete", "response.failed")


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def _usage_from_sse(text: str, seen: Seen) -> None:
    for line in text.splitlines():
        if not line.startswith("data: "):
            continue
        try:
            data = json.loads(line[6:])
        except ValueError:
            continue
        if data.get("type") == "message_start":
            seen.usage.update(data["message"].get("usage", {}))
        elif data.get("type") == "message_delta":
            seen.usage.update(data.get("usage", {}))
        elif data.get("type") == "error":
            seen.error = data["error"].get("message")
        elif data.get("type") in RESPONSE_ENDS:
            seen.usage.update(data["response"].get("usage") or {})
            if data["response"].get("error"):
                seen.error = data["response"]["error"].get("message")


def recording_proxy(
    upstream: str,
    log: list[Seen],
    timeout_s: float = 600.0,
    paths: frozenset[str] = frozenset({"/v1/messages"}),
) -> FastAPI:
    client = httpx.AsyncClient(base_url=upstream, timeout=timeout_s)

    async def forward(request: Request) -> Response:
        raw = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        seen = Seen(request.url.path, {k.lower(): v for k, v in headers.items()}, body)
        if request.url.path in paths:
            log.append(seen)
        upstream_request = client.build_request(request.method, path, headers=headers, content=raw)
        response = await client.send(upstream_request, stream=True)
        seen.status = response.status_code
        out_headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_HEADERS}

        async def relay() -> Any:
            chunks: list[bytes] = []
            try:
                async for chunk in response.aiter_raw():
                    chunks.append(chunk)
                    yield chunk
            finally:
                await response.aclose()
                text = b"".join(chunks).decode(errors="replace")
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    _usage_from_sse(text, seen)
                else:
                    _usage_from_json(text, seen)

        return StreamingResponse(relay(), status_code=response.status_code, headers=out_headers)

    app = FastAPI()
    app.add_api_route("/{path:path}", forward, methods=["GET", "POST", "HEAD", "PUT", "DELETE"])
    return app


def _usage_from_json(text: str, seen: Seen) -> None:
    try:
        data = json.loads(text)
    except ValueError:
        return
    if isinstance(data, dict):
        if isinstance(data.get("usage"), dict):
            seen.usage.update(data["usage"])
        if data.get("type") == "error":
            seen.error = data["error"].get("message")
