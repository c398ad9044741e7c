"""The simulator's tiers: copies that take time on a clock, over real tiers or none.

`TimedTiers` wraps any tiers (the engine's `TorchTiers`, or `NullTiers`) and
charges every copy the way the engine makes it. `TorchTiers` copies on the
scheduler's thread and waits for each copy (`penelope_engine.tiers.copies`), so
a copy stalls the whole step, not only the request it is for: every copy made
on the step thread (demotions, write-through at a turn's end, loads from the
host and the store, spills of host pages to the store, prefetched pages
installed into the host tier) keeps the thread busy (`thread_free`), and the
next step's forward starts once it is free (`bench.sim.replica.Replica`). An
admission's `ready_at` is therefore `now`: its copies are done before the
forward of the step that runs its first chunk, as in the engine.

With `layers` > 1 loads stream layer by layer, overlapped with the forward,
as SGLang HiCache loads host KV back (a per-layer event on its load stream;
the forward of layer i waits only for layer i's copy): the loads of a step
(`take_streamed`) are not on the thread but bound the step from below (the
replica's `_span`). With `async_writes` device-to-host copies go on a stream
of their own and stall nothing (HiCache's write-through: its cache
controller's write stream); with `async_spills` writes to the store go on the
store's channel only (HiCache's storage backends, LMCache's disk backend).
Penelope's tiers do neither: every copy is on the step.

Reads ahead (`read_ahead`, the prefetcher's) run on the store's channel
(`store_free`) on a thread of their own, as `TorchTiers`' reader does: they
stall nothing, and a demand load from the store waits for the channel. When
the read is installed, the copy into host pages is on the step thread.

`FreeCopies` is a cost model whose copies take no time: a what-if that bounds
every prefetch and every overlap of loads with the forward.

`NullTiers` moves no bytes: host copies always succeed, and the store is a set
of (tenant, page id) that spilled pages join (no byte budget).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.sim.costmodel import CostModel, OtherCopies
from penelope_engine.cache.tier import Tier
from penelope_engine.cache.tree import Node
from penelope_engine.core import CoreTiers
from penelope_engine.tiers.contract import ReadAhead

READ_WAIT_S = 60.0  # over real tiers: longest wait for a read the clock says is done


class FreeCopies(OtherCopies):
    """`inner` with copies between tiers that take no time (a what-if: what no prefetch or
    overlap of loads can beat); compute costs what `inner` says."""

    def load_time(self, tokens: int, tier: Tier) -> float:
        return 0.0

    def offload_time(self, tokens: int) -> float:
        return 0.0

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "free_copies": True}


class NullTiers:
    """Tiers without bytes; the store remembers which pages were spilled to it."""

    def __init__(self) -> None:
        self.stored: set[tuple[str, int]] = set()

    def begin(self) -> None:
        pass

    def ready_at(self, now: float) -> float:
        return now

    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        return True

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        return True

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        self.stored.update((node.tenant, int(h)) for h in node.hashes[idx])
        return True

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        n = 0
        while n < len(hashes) and (tenant, int(hashes[n])) in self.stored:
            n += 1
        return n

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        return np.array([(tenant, int(h)) in self.stored for h in hashes], dtype=bool)

    def read_ahead(self, hashes: np.ndarray, tokens: np.ndarray, tenant: str) -> ReadAhead:
        return Found(np.array([(tenant, int(h)) in self.stored for h in hashes], dtype=bool))


class Found:
    """A read that is over: `NullTiers`' (nothing to copy) and, once its time has passed,
    `TimedTiers`' over any tiers."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask

    def done(self, now: float) -> bool:
        return True

    def wait(self, timeout_s: float) -> bool:
        return True

    def found(self) -> np.ndarray:
        return self.mask

    def install(self, idx: np.ndarray, host_pages: np.ndarray) -> bool:
        return True


class TimedRead:
    """A read ahead that takes the store's time on the simulated clock: done at `done_at`
    (the engine's own read, under it, is awaited then: the clock says when it ends); its
    install into host pages is a copy on the step thread (`on_install`)."""

    def __init__(self, inner: ReadAhead, done_at: float, on_install: Callable[[int], None]) -> None:
        self.inner, self.done_at, self.on_install = inner, done_at, on_install

    def done(self, now: float) -> bool:
        return now >= self.done_at and self.inner.wait(READ_WAIT_S)

    def wait(self, timeout_s: float) -> bool:
        return self.inner.wait(timeout_s)

    def found(self) -> np.ndarray:
        return self.inner.found()

    def install(self, idx: np.ndarray, host_pages: np.ndarray) -> bool:
        ok = self.inner.install(idx, host_pages)
        if ok:
            self.on_install(len(idx))
        return ok


@dataclass
class CopyStats:
    """Pages each kind of copy moved, and the seconds the step thread spent copying."""

    d2h_pages: int = 0  # demotions and write-through
    h2d_pages: int = 0  # loads from the host and the store
    spill_pages: int = 0  # host pages written to the store
    install_pages: int = 0  # prefetched pages copied into the host tier
    read_ahead_pages: int = 0  # read from the store by the prefetcher (off the thread)
    step_copy_s: float = 0.0  # seconds of copies on the step thread (each stalls a step)
    streamed_s: float = 0.0  # seconds of loads streamed under the forward (`layers` > 1)


class TimedTiers:
    def __init__(
        self,
        inner: CoreTiers | NullTiers,
        cost: CostModel,
        page_size: int,
        clock: Callable[[], float],
        layers: int = 1,
        async_writes: bool = False,
        async_spills: bool = False,
    ) -> None:
        if layers < 1:
            raise ValueError(f"layers must be >= 1, got {layers}")
        self.inner, self.cost, self.page_size, self.clock = inner, cost, page_size, clock
        self.layers = layers  # > 1: loads stream layer by layer, overlapped with the forward
        self.async_writes = async_writes  # device-to-host copies on a stream of their own
        self.async_spills = async_spills  # writes to the store on a thread of their own
        self.thread_free = -math.inf  # when the step thread is done with its copies
        self.d2h_free = 0.0  # when the device-to-host channel is next idle (async writes)
        self.store_free = 0.0  # when the store's channel is next idle (reads ahead, loads)
        self._streamed = 0.0  # seconds of loads to stream under the next step's forward
        self.stats = CopyStats()

    # -- the step thread's time ------------------------------------------------------
    def _on_thread(self, seconds: float) -> None:
        """A copy on the step thread: it starts when the thread is free and holds it."""
        start = max(self.clock(), self.thread_free)
        self.thread_free = start + seconds
        self.stats.step_copy_s += seconds

    def step_start(self, now: float) -> float:
        """When a step planned at `now` can start its forward: its copies are done."""
        return max(now, self.thread_free)

    def take_streamed(self) -> float:
        """Seconds of loads the coming step streams under its forward (`layers` > 1)."""
        s, self._streamed = self._streamed, 0.0
        return s

    def begin(self) -> None:
        """`SchedulerTiers`: nothing to mark, a copy is charged to the thread when made."""

    def ready_at(self, now: float) -> float:
        """Copies are done before the forward of the step that admits (`step_start`)."""
        return now

    # -- copies ------------------------------------------------------------------------
    def device_to_host(self, device_pages: np.ndarray, host_pages: np.ndarray) -> bool:
        ok = self.inner.device_to_host(device_pages, host_pages)
        n = len(device_pages)
        if n:
            seconds = self.cost.offload_time(n * self.page_size)
            if self.async_writes:  # on its own stream: only the channel is busy
                self.d2h_free = max(self.clock(), self.d2h_free) + seconds
            else:
                self._on_thread(seconds)
            self.stats.d2h_pages += n
        return ok

    def _load(self, pages: int, tier: Tier) -> None:
        if not pages:
            return
        seconds = self.cost.load_time(pages * self.page_size, tier)
        if tier == Tier.STORE:  # a store load waits for the store's channel (reads ahead)
            start = max(self.clock(), self.thread_free, self.store_free)
            seconds += start - max(self.clock(), self.thread_free)
            self.store_free = start + seconds
        if self.layers > 1:
            self._streamed += seconds
            self.stats.streamed_s += seconds
        else:
            self._on_thread(seconds)
        self.stats.h2d_pages += pages

    def host_to_device(self, host_pages: np.ndarray, device_pages: np.ndarray) -> bool:
        ok = self.inner.host_to_device(host_pages, device_pages)
        self._load(len(host_pages) if ok else 0, Tier.HOST)
        return ok

    def spill(self, node: Node, idx: np.ndarray) -> bool:
        """Host pages written to the store on the step thread, as `TorchTiers.spill` does
        (with `async_spills` on the store's channel only)."""
        ok = self.inner.spill(node, idx)
        if ok and len(idx):
            seconds = self.cost.load_time(len(idx) * self.page_size, Tier.STORE)
            if self.async_spills:
                self.store_free = max(self.clock(), self.store_free) + seconds
            else:
                self._on_thread(seconds)
            self.stats.spill_pages += len(idx)
        return ok

    def _installed(self, pages: int) -> None:
        """Prefetched pages copied into host pages (a host copy, charged at the host's rate)."""
        self._on_thread(self.cost.load_time(pages * self.page_size, Tier.HOST))
        self.stats.install_pages += pages

    def store_run(self, hashes: np.ndarray, tenant: str) -> int:
        return self.inner.store_run(hashes, tenant)

    def load_store(
        self, hashes: np.ndarray, tokens: np.ndarray, tenant: str, device_pages: np.ndarray
    ) -> np.ndarray:
        loaded = self.inner.load_store(hashes, tokens, tenant, device_pages)
        self._load(int(loaded.sum()), Tier.STORE)
        return loaded

    def read_ahead(self, hashes: np.ndarray, tokens: np.ndarray, tenant: str) -> ReadAhead | None:
        """A read ahead on the store's channel, behind what it already carries, off the step
        thread (store to host memory); installing it is a copy on the thread."""
        inner = self.inner.read_ahead(hashes, tokens, tenant)
        if inner is None:
            return None
        start = max(self.clock(), self.store_free)
        self.store_free = start + self.cost.load_time(len(hashes) * self.page_size, Tier.STORE)
        self.stats.read_ahead_pages += len(hashes)
        return TimedRead(inner, self.store_free, self._installed)
