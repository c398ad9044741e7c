"""`ReadBudget`: a store read on the request path waits at most a fixed budget.

A read the step (or a request's admission) needs runs on one of a few reader
threads; the caller waits `budget_s` for it, then goes on without it: its
pages are misses, recomputed (the ledger names them `store_miss`). Reads that
come while every thread is busy wait their turn within their own budget (a
burst of sessions returning after a replica died all find their records); one
whose budget ends before it started is never started. A read that overran
keeps its thread until the store's own request timeout ends it, so when every
thread is held by a read already past its budget (the store is stalled), a new
read is not even started: it is a miss at once.

Each wait stalls the step (and so every running request) for up to
`budget_s`, so a store that stays slow would cost a budget per read: with
dozens of sessions returning, most of the step's time. After a read overruns,
reads are therefore misses at once for a cool-down: `budget_s * 2`, doubling
with each overrun in a row up to `COOLDOWN_MAX_BUDGETS` budgets (16 s at the
0.5 s default), and back to none once a read answers within its budget. So a
slow store's stall falls to one budget per cool-down (3 % of the step at the
cap), and a store that recovers is read again within one cool-down.

A read that stalls only its own request (a session's path record, read when it
arrives, off the step thread) has no cool-down (`cool_down=False`): one slow
read must not cost the next arriving session its whole history.

    caller: submit(read) --wait <= budget_s--> result | default (timed out / stalled /
                                                                 cooling down)
"""

from __future__ import annotations

import itertools
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
    def __init__(
        self,
        budget_s: float,
        threads: int = READ_THREADS,
        cool_down: bool = True,
        miss: str = "its pages are recomputed",  # what a read past its budget costs, logged
    ) -> None:
        if not 0 < budget_s < float("inf"):
            raise ValueError(f"budget_s must be positive and finite, got {budget_s}")
        self.budget_s, self.threads, self.cool_down = budget_s, threads, cool_down
        self.miss = miss
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="penelope-store-read")
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}  # running reads: when each started
        self._ids = itertools.count()
        self._overruns = 0  # in a row
        self._cool_until = 0.0
        self.timeouts = 0  # reads the caller stopped waiting for
        self.skipped = 0  # reads not started: every thread held past its budget, or cooling down

    def call(self, read: Callable[[], T], default: T, what: str = "a store read") -> T:
        """`read()`'s result if it comes within the budget, else `default`."""
        with self._lock:
            now = time.monotonic()
            if now < self._cool_until or self._stalled(now):
                self.skipped += 1
                return default
        job = self._pool.submit(self._run, read, what)
        try:
            result = job.result(timeout=self.budget_s)
        except FutureTimeout:
            job.cancel()  # still queued behind busy threads: it never runs
            with self._lock:
                self.timeouts += 1
                first = self.timeouts == 1
                self._overruns += 1
                if self.cool_down:
                    doubling = min(2**self._overruns, COOLDOWN_MAX_BUDGETS)
                    self._cool_until = time.monotonic() + self.budget_s * doubling
            (log.warning if first else log.debug)(
                "%s passed its budget of %g s; %s", what, self.budget_s, self.miss
            )
            return default
        with self._lock:
            self._overruns = 0
        return result

    def _stalled(self, now: float) -> bool:
        """Every reader thread holds a read already past its budget."""
        started = self._started.values()
        return len(started) >= self.threads and all(now - t > self.budget_s for t in started)

    def _run(self, read: Callable[[], T], what: str) -> T:
        t0 = time.monotonic()
        with self._lock:
            self._started[key := next(self._ids)] = t0
        try:
            return read()
        finally:
            took = time.monotonic() - t0
            with self._lock:
                del self._started[key]
            if took > self.budget_s:  # how late the store was, for whoever tunes the budget
                log.info("%s took %.2f s, past its budget of %g s", what, took, self.budget_s)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
