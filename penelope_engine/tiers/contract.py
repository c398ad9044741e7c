"""What the scheduler asks of the tiers: loads back to the device, and when copies are done.

Two implementations: `penelope_engine.tiers.copies.TorchTiers` moves real KV bytes
(copies finish before it returns, so `ready_at(now)` is `now`), and the
simulator's `bench.sim.tiers.TimedTiers` charges each copy to a PCIe channel
on the simulated clock, over either real tiers or none. The scheduler brackets
an admission with `begin()` and `ready_at(now)`: the request's prefill waits
until every copy made in between (device pages demoted to make room, pages
loaded from the host or the store) is done.

`read_ahead` starts a background read of store pages for the host tier (the
prefetcher, `penelope_engine.sched.prefetch`): nothing in the tree changes
until the read is done and the scheduler installs what it found.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class ReadAhead(Protocol):
    """A background read of store pages, started by `SchedulerTiers.read_ahead`."""

    def done(self, now: float) -> bool:
        """The read has finished (found or failed) by `now`; never blocks."""
        ...

    def wait(self, timeout_s: float) -> bool:
        """Block until the read is done or `timeout_s` passed; True when done (the
        simulator's clock says when a read ends, so over real tiers it waits for it)."""
        ...

    def found(self) -> np.ndarray:
        """Once done: the mask of the pages read intact (their very tokens)."""
        ...

    def install(self, idx: np.ndarray, host_pages: np.ndarray) -> bool:
        """Copy read pages `idx` into host pool slots `host_pages`; False if the copy failed."""
        ...


class SchedulerTiers(Protocol):
    def begin(self) -> None:
        """An admission starts: copies from here on are the request's own."""

    def ready_at(self, now: float) -> float:
        """When the copies since `begin()` are done (>= now)."""
        ...

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        """Copy host pages to device pages; False when the copy failed (recompute them)."""
        ...

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        """How many of `hashes`, from the first, the store holds (an index look-up)."""
        ...

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        """Load store pages into `device_pages`; the mask of pages that loaded."""
        ...

    def read_ahead(self, hashes: np.ndarray, tokens: np.ndarray, tenant: str) -> ReadAhead | None:
        """Start reading store pages in the background for the host tier; None when there
        is no store or no host tier."""
        ...
