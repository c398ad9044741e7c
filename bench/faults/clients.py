"""Clients that misbehave, all at once, while the agent sessions run (the `clients` case).

    idle       `idle_connections` sockets opened and never written to, held for fault_s
    slow body  a request whose body arrives a byte a second for about fault_s
    unread     streamed requests (a small receive buffer) whose reader stops after the
               headers for fault_s, then goes
    edge       at the window served (`/server_info`'s context_length): a prompt that fills
               it with max_tokens (must be served), one token more (400), window + 1 (400)
    burst      10x the admission limit at once (each answer 200, or 429 with Retry-After),
               once the slow body and the edge prompts are answered (not refused by it)

Every client here is a raw socket with a deadline (an httpx client for thousands of
connections costs the bench more CPU than the server spends answering them, and the
case then outlasts its load). What counts: any request with no answer within its
deadline, any 5xx other than a 503 with Retry-After, a 429 without it, and any edge
or misbehaving request not answered as above is a failure of the case.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import httpx

from bench.faults.config import MODEL, FaultsConfig

T = TypeVar("T")
EDGE_MAX_TOKENS = 4
UNREAD_STREAMS = 4
UNREAD_RCVBUF = 4096  # bytes: the server's writes block soon after the client stops reading
UNREAD_MAX_TOKENS = 200


def window(url: str) -> int:
    """The window the server serves (its model's, or less when the device pool holds less)."""
    return int(httpx.get(f"{url}/server_info", timeout=30).json()["context_length"])


def _request(host: str, body: dict[str, Any], close: bool = True) -> tuple[bytes, bytes]:
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode(), data


def _status(head: bytes) -> tuple[int, bool]:
    """The status of a response head, and whether it carries Retry-After."""
    lines = head.split(b"\r\n")
    parts = lines[0].split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, any(h.lower().startswith(b"retry-after:") for h in lines[1:])


async def _post(host: str, port: int, body: dict[str, Any], deadline_s: float) -> tuple[int, bool]:
    """One request on its own connection, read to its end: (status, Retry-After); 0: none."""
    head, data = _request(host, body)
    try:
        async with asyncio.timeout(deadline_s):
            r, w = await asyncio.open_connection(host, port)
            try:
                w.write(head + data)
                await w.drain()
                answer = await r.readuntil(b"\r\n\r\n")
                await r.read()  # the body, to the server's close
            finally:
                w.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return 0, False
    return _status(answer)


async def _idle(host: str, port: int, n: int, hold_s: float) -> int:
    socks: list[asyncio.StreamWriter] = []
    try:
        for _ in range(n):
            try:
                _, w = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
            except (OSError, TimeoutError):
                break
            socks.append(w)
        await asyncio.sleep(hold_s)
    finally:
        for w in socks:
            w.close()
    return len(socks)


async def _slow_body(host: str, port: int, seconds: int, deadline_s: float) -> int:
    """A request whose first `seconds` body bytes come a second apart, then the rest."""
    head, data = _request(host, {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2})
    slow = min(max(1, seconds), len(data))
    try:
        async with asyncio.timeout(slow + deadline_s):
            r, w = await asyncio.open_connection(host, port)
            try:
                w.write(head)
                for i in range(slow):
                    w.write(data[i : i + 1])
                    await w.drain()
                    await asyncio.sleep(1.0)
                w.write(data[slow:])
                await w.drain()
                answer = await r.readuntil(b"\r\n\r\n")
                await r.read()
            finally:
                w.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return 0
    return _status(answer)[0]


async def _unread(host: str, port: int, hold_s: float, deadline_s: float) -> int:
    """A streamed request whose client reads the response head, then nothing for hold_s."""
    body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": UNREAD_MAX_TOKENS,
            "stream": True, "ignore_eos": True}  # fmt: skip
    head, data = _request(host, body, close=False)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UNREAD_RCVBUF)  # before connect
    sock.setblocking(False)
    try:
        async with asyncio.timeout(hold_s + deadline_s):
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
            r, w = await asyncio.open_connection(sock=sock, limit=1024)
            try:
                w.write(head + data)
                await w.drain()
                answer = await r.readuntil(b"\r\n\r\n")
                await asyncio.sleep(hold_s)  # the stream is never read; then the client goes
            finally:
                w.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        sock.close()
        return 0
    return _status(answer)[0]


async def _timed(work: Awaitable[T], times: dict[str, float], name: str) -> T:
    start = time.monotonic()
    try:
        return await work
    finally:
        times[name] = round(time.monotonic() - start, 1)


def _bad(status: int, retry_after: bool) -> bool:
    """No answer, a 5xx other than 503 + Retry-After, or a 429 without Retry-After."""
    if status == 0 or (status >= 500 and not (status == 503 and retry_after)):
        return True
    return status == 429 and not retry_after


async def _misbehave(url: str, cfg: FaultsConfig, edge_window: int) -> dict[str, Any]:
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    deadline = cfg.deadline_s
    fill = edge_window - EDGE_MAX_TOKENS
    edge_bodies = [
        {"model": MODEL, "prompt": [7] * fill, "max_tokens": EDGE_MAX_TOKENS},  # 200
        {"model": MODEL, "prompt": [7] * (fill + 1), "max_tokens": EDGE_MAX_TOKENS},  # 400
        {"model": MODEL, "prompt": [7] * (edge_window + 1), "max_tokens": 1},  # 400
    ]
    burst_bodies = [
        {"model": MODEL, "prompt": [3, 4, i % 500 + 10], "max_tokens": 1}
        for i in range(10 * cfg.max_pending)
    ]
    times: dict[str, float] = {}

    async def answered_then_burst() -> tuple[int, list[tuple[int, bool]], list[tuple[int, bool]]]:
        """The slow body and the edge prompts, then (so that they are not refused by it) the
        burst, while the idle sockets and the unread streams are held."""
        slow, edge = await asyncio.gather(
            _timed(_slow_body(host, port, int(cfg.fault_s) - 1, deadline), times, "slow_body"),
            _timed(
                asyncio.gather(*(_post(host, port, b, deadline) for b in edge_bodies)),
                times,
                "edge",
            ),  # fmt: skip
        )
        burst = await _timed(
            asyncio.gather(*(_post(host, port, b, deadline) for b in burst_bodies)), times, "burst"
        )
        return slow, list(edge), list(burst)

    idle, unread, (slow, edge, burst) = await asyncio.gather(
        _timed(_idle(host, port, cfg.idle_connections, cfg.fault_s), times, "idle"),
        _timed(
            asyncio.gather(
                *(_unread(host, port, cfg.fault_s, deadline) for _ in range(UNREAD_STREAMS))
            ),
            times,
            "unread",
        ),
        answered_then_burst(),
    )
    burst_status = [s for s, _ in burst]
    edge_status = [s for s, _ in edge]
    failures = {
        "burst": sum(1 for s, ra in burst if _bad(s, ra)),
        "edge": int(edge_status != [200, 400, 400]),
        "unread": sum(1 for u in unread if u != 200),
        "slow_body": int(slow != 200),
        "idle": int(idle < cfg.idle_connections),
    }
    return {
        "window": edge_window,
        "idle_connections_held": idle,
        "slow_body_status": slow,
        "unread_stream_status": list(unread),
        "window_edge_status": edge_status,  # [200 filling it, 400 one over, 400 past it]
        "burst": {str(s): burst_status.count(s) for s in sorted(set(burst_status))},
        "seconds": times,
        "failures_by_kind": failures,
        "failures": sum(failures.values()),
    }


def misbehave(url: str, cfg: FaultsConfig) -> dict[str, Any]:
    return asyncio.run(_misbehave(url, cfg, window(url)))
