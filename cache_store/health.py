"""How a store call fails: timeouts, retries with backoff and jitter, and a degraded state.

Every I/O call of `ArrowSegmentStore` goes through `StoreHealth.call`. On a
filesystem, a call that raises `OSError` is retried (`StoreTuning.retries`
more times, each after a random sleep in [0, min(backoff_max_s, backoff_s *
2**attempt)]: "full jitter", so replicas that failed together do not retry
together). On S3 one store call makes several HTTP calls (a write: a size
check, an upload's start, parts, end), so the AWS SDK retries each HTTP call
instead, as many times, with its own exponential backoff and jitter
(`StoreLocation.open`); a 503 SlowDown on half the calls then costs retries,
not the write. A call that fails after its retries marks the store degraded:

    healthy --(a call fails after its retries)--> degraded     (reads and writes apart:
                                                                a full volume still reads)
    degraded: calls fail at once (`StoreDegraded`), except one probe every
              `probe_s` (jittered), tried once
    degraded --(any call succeeds)--> healthy      (a log line each way)

So an unreachable or throttling store costs each caller one fast failure
(a miss: the KV is recomputed; a refused write: its pages stay unstored), not
a timeout each; and writes resume within `probe_s` (+ one call) of the store
answering again. A missing file is an answer, not a failure.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


class StoreDegraded(OSError):
    """The store failed recently and this call was not its probe: not attempted."""


@dataclass(frozen=True)
class StoreTuning:
    """Timeouts, retries and the probe interval of a store's calls. Validated."""

    connect_timeout_s: float = 2.0  # S3: opening a connection
    request_timeout_s: float = 10.0  # S3: waiting on a response
    retries: int = 2  # more attempts of a failed call, after the first
    backoff_s: float = 0.1  # first retry's sleep ceiling; doubles each retry
    backoff_max_s: float = 2.0
    probe_s: float = 2.0  # while degraded: one call is tried this often

    def __post_init__(self) -> None:
        for name in ("connect_timeout_s", "request_timeout_s", "probe_s"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"{name} must be positive and finite, got {value}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if not 0 <= self.backoff_s <= self.backoff_max_s < float("inf"):
            raise ValueError(
                f"backoff_s must be >= 0 and at most backoff_max_s, both finite; got "
                f"{self.backoff_s} and {self.backoff_max_s}"
            )

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The sleep before retry `attempt` (0-based): full jitter under a doubling cap."""
        return rng.uniform(0.0, min(self.backoff_max_s, self.backoff_s * 2**attempt))


@dataclass(frozen=True)
class HealthStats:
    degraded: bool
    degraded_s: float  # how long the current degraded spell has lasted (0 when healthy)
    episodes: int  # degraded spells since start
    retries: int  # retried attempts
    skipped: int  # calls not attempted while degraded


class StoreHealth:
    """The degraded state of one store and the retrying call wrapper. Thread-safe."""

    def __init__(
        self,
        tuning: StoreTuning,
        where: str,
        retries: int | None = None,
        role: str = "calls",
        seed: int | None = None,
    ) -> None:
        """`retries`: of each call here (None: `tuning.retries`; 0 where the client retries);
        `role`: what these calls are, in the log lines ("reads", "writes")."""
        self.tuning, self.where, self.role = tuning, where, role
        self.call_retries = tuning.retries if retries is None else retries
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._degraded_at: float | None = None
        self._next_probe = 0.0
        self._episodes = self._retries = self._skipped = 0

    @property
    def degraded(self) -> bool:
        with self._lock:
            return self._degraded_at is not None

    def stats(self) -> HealthStats:
        with self._lock:
            since = self._degraded_at
            spell = time.monotonic() - since if since is not None else 0.0
            return HealthStats(
                since is not None, spell, self._episodes, self._retries, self._skipped
            )

    def admits(self) -> bool:
        """Whether a call now would run: healthy, or the degraded store's probe is due.
        False counts as a call skipped (a caller that would prepare work first asks)."""
        with self._lock:
            if self._degraded_at is None or time.monotonic() >= self._next_probe:
                return True
            self._skipped += 1
            return False

    def call(self, op: Callable[[], T], what: str) -> T:
        """`op()`, retried on `OSError` while healthy; raises its last error, or
        `StoreDegraded` when the store is degraded and this is not a probe."""
        probe = self._admit(what)
        attempts = 1 if probe else self.call_retries + 1
        for attempt in range(attempts):
            try:
                result = op()
            except FileNotFoundError:
                self._answered()
                raise
            except OSError as e:
                if attempt + 1 == attempts:
                    self._failed(what, e)
                    raise
                with self._lock:
                    self._retries += 1
                    pause = self.tuning.backoff(attempt, self._rng)
                time.sleep(pause)
            else:
                self._answered()
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _admit(self, what: str) -> bool:
        """True when this call is the degraded store's probe; raises when it may not run."""
        with self._lock:
            if self._degraded_at is None:
                return False
            now = time.monotonic()
            if now < self._next_probe:
                self._skipped += 1
                raise StoreDegraded(f"KV store {self.role} at {self.where} are degraded: {what}")
            self._next_probe = now + self.tuning.probe_s * self._rng.uniform(0.5, 1.0)
            return True

    def _answered(self) -> None:
        with self._lock:
            since, self._degraded_at = self._degraded_at, None
        if since is not None:
            logger.warning(
                "KV store %s at %s succeed again after %.1f s degraded; they resume",
                self.role, self.where, time.monotonic() - since,
            )  # fmt: skip

    def _failed(self, what: str, err: OSError) -> None:
        with self._lock:
            first = self._degraded_at is None
            now = time.monotonic()
            if first:
                self._degraded_at = now
                self._episodes += 1
            self._next_probe = now + self.tuning.probe_s * self._rng.uniform(0.5, 1.0)
        if first:
            logger.warning(
                "KV store %s at %s are degraded (%s failed: %s); until a probe (every %g s) "
                "succeeds they fail at once (a read: recomputed; a write: its pages unstored)",
                self.role, self.where, what, err, self.tuning.probe_s,
            )  # fmt: skip
