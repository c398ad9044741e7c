"""HTTP connections with a deadline for their first request.

uvicorn closes a kept-alive connection that sends nothing for
`timeout_keep_alive` seconds after a response, but a new connection that
never sends a byte is held forever: enough of them and the server runs out of
file descriptors while serving nobody. `first_request_deadline(timeout_s)` is
uvicorn's own HTTP protocol (httptools when installed, as uvicorn's "auto"
picks, else h11) with that timer armed for `timeout_s`
(`api.connect_idle_timeout_s`, 60 s as nginx's `client_header_timeout`) when
the connection is made. The first byte cancels it, as on a kept-alive
connection; a body is then bounded by `middleware.BodyLimits`, a request by
`api.request_timeout_s`. It is longer than the keep-alive timeout because a
client in a burst may connect well before its loop gets round to writing.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def _base() -> type[Any]:
    if importlib.util.find_spec("httptools") is None:
        return H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return HttpToolsProtocol


def first_request_deadline(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class, closing a new connection that sends nothing in
    `timeout_s`."""
    base = _base()

    class FirstRequestDeadline(base):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self.timeout_keep_alive_task = self.loop.call_later(
                timeout_s, self.timeout_keep_alive_handler
            )

    return FirstRequestDeadline
