"""`ReadBudget`: a store read on the request path waits at most a fixed budget.

A read the step (or a request's admission) needs runs on one of a few reader
threads; the caller waits `budget_s` for it, then goes on without it: its
pages are misses, recomputed (the ledger names them `store_miss`). A read
that overran keeps its thread until the store's own request timeout ends it,
so when every thread is taken by a stalled store, a new read is not even
started: it is a miss at once.

Each wait stalls the step (and so every running request) for up to
`budget_s`, so a store that stays slow would cost a budget per read: with
dozens of sessions returning, most of the step's time. After a read overruns,
reads are therefore misses at once for a cool-down: `budget_s * 2`, doubling
with each overrun in a row up to `COOLDOWN_MAX_BUDGETS` budgets (16 s at the
0.5 s default), and back to none once a read answers within its budget. So a
slow store's stall falls to one budget per cool-down (3 % of the step at the
cap), and a store that recovers is read again within one cool-down.

    caller: submit(read) --wait <= budget_s--> result | default (timed out / no thread /
                                                                 cooling down)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
READ_THREADS = 2
COOLDOWN_MAX_BUDGETS = 32


class ReadBudget:
    def __init__(self, budget_s: float, threads: int = READ_THREADS) -> None:
        if not 0 < budget_s < float("inf"):
            raise ValueError(f"budget_s must be positive and finite, got {budget_s}")
        self.budget_s, self.threads = budget_s, threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="penelope-store-read")
        self._lock = threading.Lock()
        self._busy = 0
        self._overruns = 0  # in a row
        self._cool_until = 0.0
        self.timeouts = 0  # reads the caller stopped waiting for
        self.skipped = 0  # reads not started: every reader thread busy, or cooling down

    def call(self, read: Callable[[], T], default: T, what: str = "a store read") -> T:
        """`read()`'s result if it comes within the budget, else `default`."""
        with self._lock:
            if self._busy >= self.threads or time.monotonic() < self._cool_until:
                self.skipped += 1
                return default
            self._busy += 1
        job = self._pool.submit(self._run, read)
        try:
            result = job.result(timeout=self.budget_s)
        except FutureTimeout:
            with self._lock:
                self.timeouts += 1
                first = self.timeouts == 1
                self._overruns += 1
                doubling = min(2**self._overruns, COOLDOWN_MAX_BUDGETS)
                self._cool_until = time.monotonic() + self.budget_s * doubling
            (log.warning if first else log.debug)(
                "%s passed its budget of %g s; its pages are recomputed", what, self.budget_s
            )
            return default
        with self._lock:
            self._overruns = 0
        return result

    def _run(self, read: Callable[[], T]) -> T:
        try:
            return read()
        finally:
            with self._lock:
                self._busy -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
