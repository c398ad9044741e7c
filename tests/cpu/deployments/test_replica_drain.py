"""A leaving engine replica drains to the store and says how much, even when it is nothing.

`penelope bench cluster` counts drained pages from the replicas' logs, so the
line must reach Serve's logger (the replica's own log file) at 0 too: with
writes behind, 0 is the usual count.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from deployments.ray.engine_replica import EngineReplica
from deployments.ray.replica_logs import SERVE_LOG
from penelope_engine.protocol import UNDRAINED_PAGES_REFUSED, UNDRAINED_RECORD_LATE, DrainReport


class FakeEngine:
    """The two members a leaving replica calls, answering as told (the real drain's
    reports are `tests/cpu/penelope_engine/test_drain.py`'s)."""

    def __init__(self, written: DrainReport | Exception) -> None:
        self.written = written
        self.shut = False

    def drain_to_store(self) -> DrainReport:
        if isinstance(self.written, Exception):
            raise self.written
        return self.written

    async def shutdown(self) -> None:
        self.shut = True


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class _Replica(EngineReplica):
    def __del__(self) -> None:  # type: ignore[override]
        """Garbage collection must not call the async one (Serve awaits it, below)."""


def _leave(written: DrainReport | Exception) -> tuple[EngineReplica, FakeEngine, list[str]]:
    replica = object.__new__(_Replica)  # no Serve context: only what __del__ reads
    engine = FakeEngine(written)
    replica._engine = engine  # type: ignore[assignment]
    replica._reporter = None
    replica._sink = None
    replica.drained_pages = None
    handler, level = Lines(), SERVE_LOG.level
    SERVE_LOG.addHandler(handler)
    SERVE_LOG.setLevel(logging.INFO)
    try:
        asyncio.run(EngineReplica.__del__(replica))
    finally:
        SERVE_LOG.removeHandler(handler)
        SERVE_LOG.setLevel(level)
    return replica, engine, handler.lines


@pytest.mark.parametrize("written", [0, 7])
def test_the_drain_is_logged_and_kept_whatever_it_wrote(written: int) -> None:
    replica, engine, lines = _leave(DrainReport(pages=written))
    assert replica.drained_pages == written and engine.shut
    assert any(f"drained {written} KV pages to the store" in line for line in lines), lines


def test_a_failed_drain_is_logged_and_the_engine_still_shuts_down() -> None:
    replica, engine, lines = _leave(OSError("store gone"))
    assert engine.shut and replica.drained_pages is None
    assert any("draining KV to the store before shutdown failed" in line for line in lines)


def test_every_session_the_drain_could_not_leave_whole_is_named_with_why() -> None:
    undrained = (("s-1", UNDRAINED_PAGES_REFUSED), ("s-2", UNDRAINED_RECORD_LATE))
    replica, engine, lines = _leave(DrainReport(pages=3, undrained=undrained))
    assert replica.drained_pages == 3 and engine.shut
    for session, why in undrained:
        assert f"could not drain session {session} to the store: {why}" in lines, lines
