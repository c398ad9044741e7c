"""A stream whose client stops reading: one write waits `stall_s` at most, then the request
is aborted (`on_close`) and counted (`on_stall`).

On loopback the kernel's send buffer autotunes to megabytes, so a real socket cannot make a
short stream's write block in a test; the ASGI `send` here blocks the way uvicorn's does when
its transport is paused (it awaits a drain that never comes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from deployments.api.run import ClosingStream

pytestmark = pytest.mark.anyio


async def _run(send: Any, spec_version: str = "2.4") -> tuple[list[bool], list[bool], int]:
    """Stream 1,000 chunks through `send`: (stalls counted, closes run, chunks pulled)."""

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client neither sends nor goes
        return {}

    closed: list[bool] = []
    stalls: list[bool] = []
    produced = 0

    async def on_close() -> None:
        closed.append(True)

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal produced
        for i in range(1000):
            produced += 1
            yield f"data: {i}\n\n".encode()

    stream = ClosingStream(chunks(), on_close=on_close, stall_s=0.2,
                           on_stall=lambda: stalls.append(True))  # fmt: skip
    with anyio.fail_after(5):
        await stream({"type": "http", "asgi": {"spec_version": spec_version}}, receive, send)
    return stalls, closed, produced


@pytest.mark.parametrize("spec_version", ["2.4", "2.3"])
async def test_a_write_that_waits_past_stall_s_ends_the_stream(spec_version: str) -> None:
    sent: list[dict[str, Any]] = []
    drained = asyncio.Event()  # never set: the client reads nothing more

    async def send(message: dict[str, Any]) -> None:
        if len(sent) >= 3:
            await drained.wait()
        sent.append(message)

    stalls, closed, produced = await _run(send, spec_version)
    assert stalls == [True] and closed == [True]
    assert len(sent) == 3 and produced < 10  # nothing was pulled past the stalled write


async def test_a_stream_read_to_its_end_is_closed_once_and_not_counted() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    stalls, closed, produced = await _run(send)
    assert stalls == [] and closed == [True] and produced == 1000
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
