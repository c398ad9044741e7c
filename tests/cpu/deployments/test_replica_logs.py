"""In a Ray replica our packages' log records land in the replica's log file, through
Ray Serve's handlers (`route_package_logs`); without it they reached no handler."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from deployments.ray.replica_logs import PACKAGE_LOGGERS, SERVE_LOG, route_package_logs


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}")


@pytest.fixture
def serve_file() -> Iterator[Lines]:
    """A handler on Ray Serve's logger, as a replica has (its log file); every logger's
    state put back afterwards."""
    loggers = [logging.getLogger(n) for n in PACKAGE_LOGGERS]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    handler = Lines()
    SERVE_LOG.addHandler(handler)
    try:
        yield handler
    finally:
        SERVE_LOG.removeHandler(handler)
        for lg, handlers, level, propagate in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate


def test_the_engines_and_the_stores_lines_reach_the_replicas_log_once(serve_file: Lines) -> None:
    route_package_logs()
    route_package_logs()  # a second replica in the process: no second copy of a line
    logging.getLogger("penelope_engine.tiers.budget").info("a path record read took 3 s")
    logging.getLogger("cache_store.health").warning("KV store reads are degraded")
    logging.getLogger("penelope_engine.tiers.budget").debug("below the level: dropped")
    assert serve_file.lines == [
        "penelope_engine.tiers.budget: a path record read took 3 s",
        "cache_store.health: KV store reads are degraded",
    ]
