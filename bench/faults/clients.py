"""Clients that misbehave, all at once, while the agent sessions run (the `clients` case).

    idle       `idle_connections` sockets opened and never written to
    slow body  a request whose body arrives a byte a second
    unread     streamed requests whose reader stops after the headers
    edge       prompts of window - 1 tokens (must be served) and window + 1 (a 400)
    burst      10x the admission limit at once (each answer 200 or 429 + Retry-After)

What counts: any 5xx other than a 503 with Retry-After, and any request with
no answer, is a failure of the case.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from bench.faults.config import MODEL, FaultsConfig

SLOW_BODY_BYTES = 12  # sent a byte a second, then the rest at once


def _window() -> int:
    from penelope_engine.model.tiny import tiny_qwen3_config

    return int(tiny_qwen3_config().max_position)


async def _idle(host: str, port: int, n: int, hold_s: float) -> int:
    socks = []
    for _ in range(n):
        try:
            socks.append(await asyncio.open_connection(host, port))
        except OSError:
            break
    await asyncio.sleep(hold_s)
    for _, w in socks:
        w.close()
    return len(socks)


async def _slow_body(host: str, port: int) -> int:
    body = json.dumps({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2}).encode()
    r, w = await asyncio.open_connection(host, port)
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    w.write(head.encode())
    try:
        for i in range(min(SLOW_BODY_BYTES, len(body))):
            w.write(body[i : i + 1])
            await w.drain()
            await asyncio.sleep(1.0)
        w.write(body[SLOW_BODY_BYTES:])
        await w.drain()
        status = await asyncio.wait_for(r.readline(), 60)
    except (OSError, TimeoutError):
        return 0
    finally:
        w.close()
    parts = status.split()
    return int(parts[1]) if len(parts) > 1 else 0


async def _unread(url: str, hold_s: float) -> int:
    body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 200, "stream": True,
            "ignore_eos": True}  # fmt: skip
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        async with http.stream("POST", "/v1/completions", json=body) as r:
            await asyncio.sleep(hold_s)  # the body is never read
            return r.status_code


async def _post(http: httpx.AsyncClient, body: dict[str, Any]) -> tuple[int, bool]:
    try:
        r = await http.post("/v1/completions", json=body)
    except httpx.HTTPError:
        return 0, False
    return r.status_code, "retry-after" in r.headers


async def _misbehave(url: str, cfg: FaultsConfig) -> dict[str, Any]:
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    window = _window()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=cfg.deadline_s, limits=limits) as http:
        edge = [
            _post(http, {"model": MODEL, "prompt": [7] * (window - 1), "max_tokens": 4}),
            _post(http, {"model": MODEL, "prompt": [7] * (window + 1), "max_tokens": 4}),
        ]
        burst = [
            _post(http, {"model": MODEL, "prompt": [3, 4, i % 500 + 10], "max_tokens": 1})
            for i in range(10 * cfg.max_pending)
        ]
        results = await asyncio.gather(
            _idle(host, port, cfg.idle_connections, cfg.fault_s),
            _slow_body(host, port),
            *(_unread(url, cfg.fault_s) for _ in range(4)),
            asyncio.gather(*edge),
            asyncio.gather(*burst),
            return_exceptions=True,
        )
    idle, slow, *unread, edge_res, burst_res = results
    burst_ok = [s for s, _ in burst_res] if isinstance(burst_res, list) else []
    failures = [
        s for s, ra in (burst_res if isinstance(burst_res, list) else [])
        if s == 0 or (s >= 500 and not (s == 503 and ra))
    ]  # fmt: skip
    edge_status = [s for s, _ in edge_res] if isinstance(edge_res, list) else []
    return {
        "idle_connections_held": idle if isinstance(idle, int) else repr(idle),
        "slow_body_status": slow if isinstance(slow, int) else repr(slow),
        "unread_stream_status": [u if isinstance(u, int) else repr(u) for u in unread],
        "window_edge_status": edge_status,  # [200 at window - 1, 400 past it]
        "burst": {str(s): burst_ok.count(s) for s in sorted(set(burst_ok))},
        "failures": len(failures)
        + (0 if edge_status == [200, 400] else 1)
        + sum(1 for u in unread if u != 200),
    }


def misbehave(url: str, cfg: FaultsConfig) -> dict[str, Any]:
    return asyncio.run(_misbehave(url, cfg))
