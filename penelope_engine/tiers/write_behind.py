"""`WriteBehind`: one background thread that runs store writes in order, within a byte bound.

The step thread copies KV out of its pools (cheap, in memory) and hands the
copies over as a job; the slow part (encoding, the file or S3 upload) runs
here, off the hot path. The bound is on the bytes of the jobs queued or
running: a job that would pass it is refused, and the caller keeps its pages
unwritten, to be offered again later (the next turn end, a spill, a drain).
So nothing is dropped and nothing queues without bound.

    step thread                          writer thread
    copy pages -> submit(nbytes, job) -> job() ... -> done: nbytes released
                  False: over the bound  (in submission order)
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Job:
    nbytes: int
    run: Callable[[], object]


class WriteBehind:
    def __init__(self, max_bytes: int, name: str = "penelope-write-behind") -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.max_bytes = max_bytes
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._pending = 0  # bytes of jobs queued or running
        self._jobs_pending = 0
        self.failed = 0  # jobs that raised (logged)
        self.refused = 0  # jobs refused: over the bound, or closed
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def pending_bytes(self) -> int:
        with self._cond:
            return self._pending

    @property
    def pending_jobs(self) -> int:
        with self._cond:
            return self._jobs_pending

    def room(self) -> int:
        """Bytes a job may have now without being refused."""
        with self._cond:
            return 0 if self._closed else self.max_bytes - self._pending

    def submit(self, nbytes: int, job: Callable[[], object]) -> bool:
        """Queue `job`; False (and nothing queued) when it would pass the bound or we are closed."""
        with self._cond:
            if self._closed or self._pending + nbytes > self.max_bytes:
                self.refused += 1
                return False
            self._pending += nbytes
            self._jobs_pending += 1
        self._jobs.put(_Job(nbytes, job))
        return True

    def flush(self, timeout_s: float) -> bool:
        """Wait until every job submitted so far is done; False if `timeout_s` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._jobs_pending == 0, timeout=timeout_s)

    def close(self, timeout_s: float) -> bool:
        """Refuse new jobs, finish the queued ones within `timeout_s`; False if some remain."""
        with self._cond:
            self._closed = True
        self._jobs.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("store writes still running %g s after close; leaving them", timeout_s)
            return False
        return True

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.run()
            except Exception:  # a write must never take the writer down
                self.failed += 1
                log.exception("a write-behind job to the KV store failed; its pages recompute")
            with self._cond:
                self._pending -= job.nbytes
                self._jobs_pending -= 1
                self._cond.notify_all()
