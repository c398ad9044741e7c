"""The placement board: the first claim holds until it expires or its replica leaves."""

from __future__ import annotations

import asyncio
import logging

import pytest

from router.board import ClaimTable, RayBoard


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_claim_holds_until_it_expires_or_its_replica_leaves() -> None:
    clock = Clock()
    table = ClaimTable(ttl_s=10.0, capacity=2, clock=clock)
    assert table.claim("s", "r0", {"r0", "r1"}) == "r0"
    assert table.claim("s", "r1", {"r0", "r1"}) == "r0"  # a later router gets the first's
    assert table.claim("s", "r1", {"r1"}) == "r1"  # r0 left: the new claim takes over
    table.settle("s", "r0")  # where the router finally sent it (its claim was full)
    assert table.claim("s", "r1", {"r0", "r1"}) == "r0"
    clock.now = 10.5
    assert table.claim("s", "r1", {"r0", "r1"}) == "r1"  # expired
    table.claim("a", "r0", {"r0"})
    table.claim("b", "r0", {"r0"})
    assert len(table) == 2  # bounded: "s", the least recently placed, went first
    assert table.claim("s", "r1", {"r0", "r1"}) == "r1"


def test_a_ray_board_without_ray_answers_none_at_once_and_backs_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    board = RayBoard("app.engine", ttl_s=10.0, capacity=8, backoff_s=5.0, clock=clock)

    async def claims() -> list[str | None]:
        return [await board.claim("s", "r0", {"r0"}) for _ in range(3)]

    serve_logger = logging.getLogger("ray.serve")  # Ray's loggers do not propagate
    serve_logger.addHandler(caplog.handler)
    try:
        assert asyncio.run(claims()) == [None, None, None]
        clock.now = 6.0  # the back-off is over: it tries again, and says so again
        assert asyncio.run(claims()) == [None, None, None]
    finally:
        serve_logger.removeHandler(caplog.handler)
    warnings = [r for r in caplog.records if "placement board" in r.getMessage()]
    assert len(warnings) == 2 and "Ray is not initialized" in warnings[0].getMessage()
    board.settle("s", "r0")  # never waits, never raises
