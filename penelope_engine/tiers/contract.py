"""What the scheduler asks of the tiers: loads back to the device, and when copies are done.

Two implementations: `penelope_engine.tiers.copies.TorchTiers` moves real KV bytes
(copies finish before it returns, so `ready_at(now)` is `now`), and the
simulator's `bench.sim.tiers.TimedTiers` charges each copy to a PCIe channel
on the simulated clock, over either real tiers or none. The scheduler brackets
an admission with `begin()` and `ready_at(now)`: the request's prefill waits
until every copy made in between (device pages demoted to make room, pages
loaded from the host or the store) is done.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


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
