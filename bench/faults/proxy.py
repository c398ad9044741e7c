"""`FaultProxy`: an HTTP/1.1 proxy between the engine and its S3 server that injects faults.

It forwards each request whole (head, then a `Content-Length` or chunked body)
and its response whole, so a fault applies per call, as a real S3 front end's
would, while the connection stays open::

    engine --HTTP--> [FaultProxy 127.0.0.1:port] --HTTP--> moto
                      delay_s:  each call waits this long before it is forwarded
                      slowdown: this share of calls is answered 503 SlowDown
                      refuse:   connections are closed unanswered (unreachable)

The fault is set while it runs (`set`); the proxy runs its own event loop on a
daemon thread, so a test or the bench drives it from synchronous code.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass

SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_NO_BODY_STATUS = (b"204", b"304")


@dataclass(frozen=True)
class Fault:
    delay_s: float = 0.0
    slowdown: float = 0.0  # share of calls answered 503 SlowDown, in [0, 1]
    refuse: bool = False

    def __post_init__(self) -> None:
        if self.delay_s < 0 or not 0 <= self.slowdown <= 1:
            raise ValueError(f"delay_s must be >= 0 and slowdown in [0, 1]: {self}")


NONE = Fault()


@dataclass
class ProxyCounts:
    calls: int = 0  # requests received
    forwarded: int = 0
    slowed_down: int = 0  # answered 503 SlowDown
    refused: int = 0  # connections closed unanswered


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], port: int, seed: int = 0) -> None:
        self.upstream, self.port = upstream, port
        self.fault = NONE
        self.counts = ProxyCounts()
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, fault: Fault) -> None:
        self.fault = fault

    def start(self) -> FaultProxy:
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._open):
                w.close()
            # A connection waiting out `delay_s` or a slow upstream does not notice its
            # socket closing: cancel what is left, and wait for it, so no task outlives
            # the loop.
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._open.add(client_w)
        try:
            while True:
                if self.fault.refuse:
                    self.counts.refused += 1
                    return
                head, body = await _read_message(client_r, client_w, request=True)
                if not head:
                    return
                self.counts.calls += 1
                fault = self.fault
                if fault.delay_s:
                    await asyncio.sleep(fault.delay_s)
                if fault.refuse:
                    self.counts.refused += 1
                    return
                if fault.slowdown and self._rng.random() < fault.slowdown:
                    self.counts.slowed_down += 1
                    client_w.write(_slowdown_response(head.startswith(b"HEAD ")))
                    await client_w.drain()
                    continue
                if up is None:
                    up = await asyncio.open_connection(*self.upstream)
                    self._open.add(up[1])
                up[1].write(head + body)
                await up[1].drain()
                no_body = head.startswith(b"HEAD ")
                r_head, r_body = await _read_message(up[0], None, request=False, no_body=no_body)
                if not r_head:
                    return
                self.counts.forwarded += 1
                client_w.write(r_head + r_body)
                await client_w.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            return
        finally:
            for w in (client_w, up[1] if up else None):
                if w is not None:
                    w.close()
                    self._open.discard(w)


def _slowdown_response(to_head: bool) -> bytes:
    """S3's throttling answer (a HEAD request's carries no body)."""
    head = (
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(SLOWDOWN_BODY)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + (b"" if to_head else SLOWDOWN_BODY)


async def _read_message(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter | None,
    request: bool,
    no_body: bool = False,
) -> tuple[bytes, bytes]:
    """One HTTP message's head and body; (b"", b"") at a clean end of the stream. A
    request's `Expect: 100-continue` is answered here (and not forwarded)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return b"", b""
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if request and headers.get(b"expect", b"").lower() == b"100-continue":
        lines = [ln for ln in lines if not ln.lower().startswith(b"expect:")]
        head = b"\r\n".join(lines)
        assert writer is not None
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    status = lines[0].split(b" ")[1] if not request and len(lines[0].split(b" ")) > 1 else b""
    if no_body or status in _NO_BODY_STATUS or status.startswith(b"1"):
        return head, b""
    if b"content-length" in headers:
        return head, await reader.readexactly(int(headers[b"content-length"]))
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        return head, await _read_chunks(reader)
    if request:
        return head, b""
    return head, await reader.read()  # a response delimited by the connection's end


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        out += size_line
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                out += line
            return bytes(out + b"\r\n")
        out += await reader.readexactly(size + 2)
